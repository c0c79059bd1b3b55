"""relu3 end to end: the Python source, the interpreter, the compiled exports, the install tree."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

from ksbuild.cli import main as cli_main

EXAMPLE = ROOT / "examples/relu3"
GOLDEN = ROOT / "tests/golden/relu3"
POINTS = np.array([-2.0, -1e-6, 0.0, 1e-6, 0.25, 0.5, 1 - 1e-6, 1.0, 1 + 1e-6, 3.0], dtype=np.float32)


def relu3_py():
    spec = importlib.util.spec_from_file_location("relu3_example", EXAMPLE / "relu3.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.relu3


def relu3_deriv(x: float) -> float:
    return 0.0 if x < 0 else x * x if x < 1 else 1.0


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist") / "activations"
    assert cli_main(["package", str(EXAMPLE / "manifest.toml"), "-o", str(out)]) == 0
    return out


def test_compiled_matches_python_source(relu3_pkg):
    f = relu3_py()
    for x in POINTS:
        assert relu3_pkg.relu3(float(x)) == pytest.approx(float(np.float32(f(float(x)))), rel=1e-6, abs=1e-7)
    np.testing.assert_allclose(relu3_pkg.vrelu3(POINTS), [f(float(x)) for x in POINTS], rtol=1e-6, atol=1e-7)


def test_compiled_derivatives(relu3_pkg):
    want = np.array([relu3_deriv(float(x)) for x in POINTS], dtype=np.float32)
    ct = np.ones_like(POINTS)
    np.testing.assert_allclose(relu3_pkg.vrelu3_vjp(POINTS, ct), want, rtol=1e-6, atol=1e-7)
    for x, d in zip(POINTS, want):
        assert relu3_pkg.relu3_vjp(float(x), 2.0) == pytest.approx(2 * d, rel=1e-6, abs=1e-7)
        assert relu3_pkg.relu3_jvp(float(x), 3.0) == pytest.approx(3 * d, rel=1e-6, abs=1e-7)
        assert relu3_pkg.relu3_grad(float(x)) == pytest.approx(d, rel=1e-6, abs=1e-7)
        second = 0.0 if x < 0 or x >= 1 else 2 * float(x)
        assert relu3_pkg.relu3_d2(float(x), 1.0) == pytest.approx(second, rel=1e-5, abs=1e-6)


def test_an_export_shows_its_arguments(relu3_pkg):
    """print(pkg.f), pkg.f.__doc__ and inspect.signature(pkg.f) name the inputs (the source's names, a vjp's
    cotangent after them), their dtypes and dims, and the results."""
    import inspect
    vjp = relu3_pkg.vrelu3_vjp
    assert repr(vjp) == ("<ksbuild export activations_vrelu3_vjp = vjp(vmap(relu3)): "
                         "(x: f32[n], ct: f32[n]) -> out: f32[n]>")
    assert repr(relu3_pkg.relu3).endswith(": (x: f32) -> result: f32>")
    assert "(x: f32[n], ct: f32[n]) -> out: f32[n]" in vjp.__doc__ and "by their names" in vjp.__doc__
    assert str(inspect.signature(vjp)) == "(x, ct, *, out=None, dims=None)"
    x, ct = np.zeros(3, np.float32), np.ones(3, np.float32)
    assert np.array_equal(vjp(ct=ct, x=x), vjp(x, ct))


def test_torch_agrees_on_gradient(relu3_pkg):
    torch = pytest.importorskip("torch")
    x = torch.tensor(POINTS.astype(np.float64), requires_grad=True)
    y = torch.where(x < 0, 0.0, torch.where(x < 1, x**3 / 3, x - 2 / 3))
    (g,) = torch.autograd.grad(y.sum(), x)
    np.testing.assert_allclose(relu3_pkg.vrelu3_vjp(POINTS, np.ones_like(POINTS)), g.numpy(), rtol=1e-6, atol=1e-6)


def test_install_tree(installed):
    for rel in ["include/activations.h", "lib/libactivations.a", "lib/cmake/activations/activationsConfig.cmake",
                "lib/cmake/activations/activationsConfigVersion.cmake", "lib/pkgconfig/activations.pc",
                "share/activations/manifest.toml", "share/activations/activations.json",
                "share/activations/src/activations.cpp"]:
        assert (installed / rel).is_file(), rel


def test_library_is_runtime_free(installed):
    """nm -u shows only libm and mem* functions: no heap, exceptions, RTTI or libstdc++."""
    out = subprocess.run(["nm", "-u", str(installed / "lib/libactivations.a")], capture_output=True, text=True,
                         check=True).stdout
    symbols = {line.split()[-1] for line in out.splitlines() if line.strip() and not line.endswith(":")}
    libm = re.compile(r"^(exp|log|log1p|expm1|sqrt|tanh|sin|cos|atan|atan2|pow|floor)f?$|^mem(cpy|set|move)$")
    assert all(libm.match(s) for s in symbols), sorted(symbols)


def test_repackage_is_cached(installed, capsys):
    assert cli_main(["package", str(EXAMPLE / "manifest.toml"), "-o", str(installed)]) == 0
    assert "up to date" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_consumer_app_with_find_package(installed, tmp_path):
    """examples/relu3/app builds against the install tree with find_package and prints right values."""
    from ksbuild.compile.cmake import cmake_exe

    cmake = cmake_exe()
    subprocess.run([cmake, "-S", str(EXAMPLE / "app"), "-B", str(tmp_path), f"-DCMAKE_PREFIX_PATH={installed}"],
                   check=True, capture_output=True)
    subprocess.run([cmake, "--build", str(tmp_path)], check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "relu3_app")], check=True, capture_output=True, text=True).stdout
    assert "0.041667" in out  # relu3(0.5) = 0.5³/3


def test_standalone_project_builds_with_plain_cmake(tmp_path):
    """ksbuild render output builds with plain cmake, no ksbuild involved."""
    from ksbuild.compile.cmake import cmake_exe

    assert cli_main(["render", str(EXAMPLE / "manifest.toml"), "-o", str(tmp_path / "proj")]) == 0
    cmake = cmake_exe()
    for args in (["-S", str(tmp_path / "proj"), "-B", str(tmp_path / "b")], ["--build", str(tmp_path / "b")],
                 ["--install", str(tmp_path / "b"), "--prefix", str(tmp_path / "prefix")]):
        subprocess.run([cmake, *args], check=True, capture_output=True)
    assert (tmp_path / "prefix/lib/libactivations.a").is_file()


def test_failed_build_leaves_no_tree(tmp_path):
    """A manifest that fails leaves no partial install tree behind."""
    bad = tmp_path / "m"
    bad.mkdir()
    (bad / "k.py").write_text("def k(x: float) -> float:\n    while x > 0:\n        x = x - 1\n    return x\n")
    (bad / "manifest.toml").write_text('[package]\nname = "bad"\n[kernels.k]\npython = "k.py:k"\n'
                                       '[exports]\nk = "k"\n')
    assert cli_main(["package", str(bad / "manifest.toml"), "-o", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_cli_error_has_no_traceback(tmp_path):
    bad = tmp_path / "manifest.toml"
    bad.write_text('[package]\nname = "p"\n[build]\nbackend = "plain"\nspeed = 3\n')
    proc = subprocess.run([sys.executable, "-m", "ksbuild", "check", str(bad)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "manifest.toml:5" in proc.stderr and "speed" in proc.stderr
