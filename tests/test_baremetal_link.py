"""A C99 program links a bare-metal package through find_package and the installed toolchain file, libm
included (newlib's log1pf: the C driver does not add -lm as g++ does), for every Cortex-M target; the
Cortex-M4 one runs on QEMU's mps2-an386 board with semihosting and prints what Python's math.log1p gives.

Needs arm-none-eabi-gcc with newlib, and qemu-system-arm for the run (scripts/install.sh installs both as
root); each test skips naming what is missing."""
from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest
from conftest import ROOT
from test_targets import build_consumer, need

from ksbuild.compile.targets import TARGETS
from ksbuild.packaging.package import package

APP = ROOT / "tests/cross/baremetal_c"
KERNEL = '''import math


def log1p(x: float) -> float:
    return math.log1p(x)
'''
MANIFEST = '''[package]
name = "lp"
version = "0.1.0"

[kernels.log1p]
python = "lp.py:log1p"

[exports]
log1p = "log1p"
vlog1p = "vmap(log1p)"
'''


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    """Package lp: log1p of one float, and its vmap."""
    root = tmp_path_factory.mktemp("lp")
    (root / "lp.py").write_text(KERNEL)
    (root / "manifest.toml").write_text(MANIFEST)
    return root / "manifest.toml"


@pytest.fixture(scope="module")
def lp_tree(manifest, tmp_path_factory):
    """lp_tree(target): package lp's install tree for a target, built once per module."""
    root, trees = tmp_path_factory.mktemp("dist"), {}

    def get(target: str):
        if target not in trees:
            trees[target] = package(manifest, root / target, target=target, progress=lambda s: None)
        return trees[target]
    return get


def _defined_symbols(elf) -> set[str]:
    """The symbols an ELF defines (nm)."""
    out = subprocess.run(["arm-none-eabi-nm", "--defined-only", str(elf)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7", "cortex-m0plus"])
def test_a_c99_program_links_libm_through_find_package(target, lp_tree, tmp_path):
    need(TARGETS[target])
    tree = lp_tree(target)
    assert "-lm" in (tree / "lib/pkgconfig/lp.pc").read_text().split("Libs:")[1].splitlines()[0]
    build_consumer(APP, tmp_path / "b", tree / "share/lp/toolchain.cmake", [tree])
    assert {"lp_log1p", "lp_vlog1p", "log1pf", "main"} <= _defined_symbols(tmp_path / "b/lp_app.elf")


def _float32_log1p(x: float) -> float:
    return float(np.float32(math.log1p(float(np.float32(x)))))


def test_the_cortex_m4_program_runs_on_qemu_mps2_an386(lp_tree, tmp_path):
    need(TARGETS["cortex-m4"])
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("qemu-system-arm not installed (scripts/install.sh, run as root, installs it with apt)")
    tree = lp_tree("cortex-m4")
    build_consumer(APP, tmp_path / "b", tree / "share/lp/toolchain.cmake", [tree], "-DKS_SEMIHOSTING=ON")
    run = subprocess.run(["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-semihosting", "-kernel",
                          str(tmp_path / "b/lp_app.elf")], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [line.split()[1:] for line in run.stdout.splitlines() if line.startswith("log1p ")]
    assert len(rows) == 6 and "status 0" in run.stdout, run.stdout
    for x, scalar, batched in ((float(v) for v in row) for row in rows):
        want = _float32_log1p(x)
        ulp = float(np.spacing(np.float32(abs(want)))) if want else 0.0
        assert abs(scalar - want) <= ulp and abs(batched - want) <= ulp, (x, scalar, batched, want)
