"""benchmarks/cortex_m4's harness on one network (its MLP): ksbuild's package and emx-onnx-cgen's C for the same ONNX
file, each linked into the benchmark's program and run on QEMU's mps2-an386 board (a Cortex-M4), both outputs
against onnxruntime's. Also checked: the instruction counter on the program's loop of known length, and that the
stack the inference wrote stays within what ksbuild's build measured (P.json's stack_bytes).

Needs arm-none-eabi-gcc with newlib and qemu-system-arm (scripts/install.sh, as root) and emx-onnx-cgen (the
test extra); skips naming what is missing."""
from __future__ import annotations

import sys

import numpy as np
import ort_oracle
import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks/cortex_m4"))
import firmware  # noqa: E402


@pytest.mark.parametrize("optimize, opt", [("speed", "-O3"), ("size", "-Os")])
def test_ksbuild_and_emx_onnx_cgen_agree_with_onnxruntime_on_a_cortex_m4(tmp_path, optimize, opt):
    if firmware.missing_tools():
        pytest.skip(f"not on PATH: {', '.join(firmware.missing_tools())} (scripts/install.sh installs them, as root)")
    pytest.importorskip("emx_onnx_cgen", reason="emx-onnx-cgen not installed (pip install -e .[test])")
    ort = pytest.importorskip("onnxruntime")
    from networks import export, models
    module, shape = models()["mlp"]
    export(module, shape, tmp_path / "mlp.onnx")
    x = firmware.input_for(shape)
    session = ort.InferenceSession(str(tmp_path / "mlp.onnx"), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0].ravel()
    tree = firmware.ksbuild_package("mlp", tmp_path / "mlp.onnx", tmp_path / "ks", optimize)
    ks = firmware.ksbuild_app(tree, "mlp", (x.size, want.size), tmp_path / "ks_app")
    source = firmware.emx_source(tmp_path / "mlp.onnx", "mlp", tmp_path / "emx")
    emx = firmware.emx_app(source, "mlp", (x.size, want.size), tmp_path / "emx_app", opt)
    for run in (ks, emx):
        np.testing.assert_allclose(run.outputs, want, rtol=1e-5, atol=1e-6)
        assert run.loop_expected <= run.loop_instructions <= run.loop_expected + 8, run.loop_instructions
        assert 10_000 < run.instructions < 10_000_000, run.instructions  # (196 x 64 + 64 x 64 + 64 x 10 products)
    # (the painted figure is at least 64 B: the method's floor; the build's is 28-88 B here)
    assert ks.stack <= max(64, firmware.ksbuild_stack(tree, "mlp")), ks.stack
    assert ks.workspace > 0
    # On a core without a vector unit a dense layer of one row is a call of ks::tiles::dense_row, one function for the
    # three layers with their bias and ReLU (transforms/dot_convs.py), not register tiles over zero-padded 16-column
    # panels (5.3 KB of flash more than emx-onnx-cgen's program), nor the dot products of ks::tiles::panel_dots with
    # an epilogue lambda per layer (2.3 KB more), nor a loop nest per layer (0.5 KB more); its ReLU a flag, not two
    # float bounds each call loads, and 2 columns at a time at size: at or below emx-onnx-cgen's flash in both builds
    # (benchmarks/README.md, Cortex-M4: 144 B and 80 B above before), in less RAM, with fewer instructions.
    names = [name for name, _ in firmware.largest_symbols(ks.elf, 10 ** 6)]
    kernels = [name for name in names if "tiles::" in name or "run_block<" in name]
    want_kernel = "tiles::dense_row<float, 2>" if optimize == "size" else "tiles::dense_row<float, 4>"
    assert len(kernels) == 1 and want_kernel in kernels[0], kernels
    assert ks.flash <= emx.flash, (ks.flash, emx.flash)  # (the same program around both: bench.py's method)
    assert ks.ram + ks.stack < emx.ram + emx.stack and ks.instructions < emx.instructions


def _dense_chain():
    """Dense layers of one row with odd and even column counts (18, 17, 16, 5) and each kind of epilogue dense_row
    applies or leaves to the generated code: a bias then a ReLU (its flag), a ReLU6 (a clamp above too: the epilogue's
    own loop after the call), a bias alone."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(24, 18), nn.ReLU(), nn.Linear(18, 17), nn.ReLU6(), nn.Linear(17, 16), nn.ReLU(),
                         nn.Linear(16, 5)), (1, 24)


@pytest.mark.parametrize("optimize", ["speed", "size"])
def test_dense_rows_of_odd_and_even_columns_agree_with_onnxruntime_on_a_cortex_m4(tmp_path, optimize):
    """ks::tiles::dense_row on QEMU: at size the layers of even n take 2 columns at a time (dense_row<float, 2>, no
    overlapping last block) and those of odd n 4 with the last block overlapping (dense_row<float, 4>); at speed all 4.
    The outputs are onnxruntime's."""
    if firmware.missing_tools():
        pytest.skip(f"not on PATH: {', '.join(firmware.missing_tools())} (scripts/install.sh installs them, as root)")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("torch")
    run, want = firmware.ksbuild_run("chain", _dense_chain(), tmp_path, optimize)
    np.testing.assert_allclose(run.outputs, want, rtol=1e-5, atol=1e-6)
    names = [name for name, _ in firmware.largest_symbols(run.elf, 10 ** 6)]
    kernels = sorted(k for k in ("dense_row<float, 2>", "dense_row<float, 4>") if any(k in name for name in names))
    assert kernels == (["dense_row<float, 2>", "dense_row<float, 4>"] if optimize == "size" else
                       ["dense_row<float, 4>"]), names


def test_the_cnn_at_speed_is_within_emx_onnx_cgens_flash_and_ram_and_the_builds_stack(tmp_path):
    """examples/onnx_cnn's network built for speed against emx-onnx-cgen at -O3 (issue 36: flash and RAM at or below,
    fewer instructions): its convolutions are dot products over their windows (ks::conv_dots), 9.7 KB of flash where
    the register tiles took 22.9 KB against emx-onnx-cgen's 10.4 KB. And the stack the inference wrote is within the
    build's figure: a window's row of padding had become a call of newlib's memset, whose 12 B the figure did not
    count."""
    if firmware.missing_tools():
        pytest.skip(f"not on PATH: {', '.join(firmware.missing_tools())} (scripts/install.sh installs them, as root)")
    pytest.importorskip("emx_onnx_cgen", reason="emx-onnx-cgen not installed (pip install -e .[test])")
    ort = pytest.importorskip("onnxruntime")
    from networks import export, models
    module, shape = models()["cnn"]
    export(module, shape, tmp_path / "cnn.onnx")
    x = firmware.input_for(shape)
    session = ort.InferenceSession(str(tmp_path / "cnn.onnx"), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0].ravel()
    sizes = (x.size, want.size)
    tree = firmware.ksbuild_package("cnn", tmp_path / "cnn.onnx", tmp_path / "ks", "speed")
    ks = firmware.ksbuild_app(tree, "cnn", sizes, tmp_path / "ks_app")
    emx = firmware.emx_app(firmware.emx_source(tmp_path / "cnn.onnx", "cnn", tmp_path / "emx"), "cnn", sizes,
                           tmp_path / "emx_app", "-O3")
    for run in (ks, emx):
        np.testing.assert_allclose(run.outputs, want, rtol=1e-5, atol=1e-6)
    assert 64 < ks.stack <= firmware.ksbuild_stack(tree, "cnn"), ks.stack
    assert ks.flash <= emx.flash, (ks.flash, emx.flash)  # (the same program around both: bench.py's method)
    assert ks.ram + ks.stack <= emx.ram + emx.stack and ks.instructions < emx.instructions


# (what each build links: for speed the SMLAD paths everywhere; for size the same tiles, but each block of positions
# gathered from the image and the depthwise taps summed in place, none of the phase volumes' code; the classifier's
# folded product reads its row in place, 4 columns at a time, without a register tile: no tile_dsp<true>)
LINKED = {"speed": (("tile_dsp<false>", "qmatmul_folded<", "depthwise_sums_dsp<"), ("gather_block<", "tile_dsp<true>")),
          "size": (("tile_dsp<false>", "qmatmul_folded<", "gather_block<", "depthwise_gathered<"),
                   ("split_phases<", "depthwise_sums_dsp<", "tile_dsp<true>"))}


@pytest.mark.parametrize("optimize", ["speed", "size"])
def test_an_int8_mobilenet_runs_its_smlad_kernels_on_a_cortex_m4_as_onnxruntime_computes_it(tmp_path, optimize):
    """benchmarks/cortex_m4's MobileNet-like net quantized by onnxruntime's quantize_static (QDQ: uint8 activations,
    int8 weights per channel), built for speed and for size: its convolutions, depthwise convolutions and classifier
    run on the kernels' SMLAD paths (ks/qconv.h KS_QTILE_DSP: qtile::tile_dsp, qtile::depthwise_sums_dsp; issue 35;
    at size KS_QCONV_GATHER: LINKED), and every output equals onnxruntime's exactly (tests/test_qtile_m4.py checks the
    kernels alone)."""
    if firmware.missing_tools():
        pytest.skip(f"not on PATH: {', '.join(firmware.missing_tools())} (scripts/install.sh installs them, as root)")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxruntime.quantization")
    from networks import export, models, quantize
    module, shape = models()["mobilenet_like"]
    export(module, shape, tmp_path / "float.onnx")
    quantize(tmp_path / "float.onnx", tmp_path / "mobilenet_like.onnx", shape, "qdq")
    x = firmware.input_for(shape)
    session = ort_oracle.session(tmp_path / "mobilenet_like.onnx")  # (exact where u8 x s8 pairs saturate)
    want = session.run(None, {"x": x})[0].ravel()
    tree = firmware.ksbuild_package("mobilenet_like", tmp_path / "mobilenet_like.onnx", tmp_path / "ks", optimize)
    ks = firmware.ksbuild_app(tree, "mobilenet_like", (x.size, want.size), tmp_path / "ks_app")
    np.testing.assert_array_equal(ks.outputs, want)
    names = " ".join(name for name, _ in firmware.largest_symbols(ks.elf, 10 ** 6))
    present, absent = LINKED[optimize]
    assert all(p in names for p in present) and not any(a in names for a in absent), names
