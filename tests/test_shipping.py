"""Findings of a held-out pass over the shipping flows (CLI, Python API, install tree), each a regression test:
x[0] of an empty axis, out= arrays that are read-only, module:function kernels that cannot be read, a wheel
folder left behind by a failed `ksbuild wheel`, and Ctrl-C. (Cross-target checks: tests/test_targets.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import ksbuild
from ksbuild.cli import main

KERNELS = '''
def first(x: "float[n]") -> float:
    return x[0]


def ema(x: "float[n]", a: float) -> float:
    m = x[0]
    for i in range(x.shape[0]):
        m = a * m + (1.0 - a) * x[i]
    return m


def total(x: "float[n]") -> float:
    s = 0.0
    for i in range(x.shape[0]):
        s = s + x[i]
    return s


def twice(x: "float[n]") -> "float[n]":
    return x * 2.0


def scaled(x: float, scale: float = 2.0, flag: bool = False) -> float:
    return x * scale if flag else x


def moments(x: "float[n]"):
    m = x.mean()
    return m, ((x - m) ** 2).mean()
'''

MANIFEST = '''[package]
name = "ship"

[build]
dtype = "float64"

[kernels]
first = { python = "k.py:first" }
ema = { python = "k.py:ema" }
total = { python = "k.py:total" }
twice = { python = "k.py:twice" }
moments = { python = "k.py:moments" }
scaled = { python = "k.py:scaled" }

[exports]
first = "first"
ema = "ema"
total = "total"
twice = "twice"
moments_vjp = "vjp(moments)"
scaled = "scaled"
scaled_vjp = "vjp(scaled)"
vscaled = "vmap(scaled, in_axes=(0, 0, None))"
'''


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("ship")
    (root / "k.py").write_text(KERNELS)
    (root / "manifest.toml").write_text(MANIFEST)
    return ksbuild.build(root / "manifest.toml", quiet=True)


def test_an_element_of_an_empty_axis_is_status_1(pkg):
    """x[0] of an empty x read out of bounds (garbage, or an ASan overflow from C); now status 1, as x[-1] was.
    A loop that takes x[i] takes nothing when x is empty: the sum of nothing is still 0."""
    empty = np.zeros(0)
    for export in (pkg.first, pkg.ema):
        with pytest.raises(export.CallError, match="status 1"):
            export(empty) if export is pkg.first else export(empty, 0.5)
    assert pkg.total(empty) == 0.0
    assert pkg.first(np.array([3.0, 4.0])) == 3.0
    assert pkg.ema(np.array([2.0]), 0.5) == 2.0


def test_the_cotangents_of_two_results_have_two_keywords(pkg):
    """vjp of a kernel returning a tuple: both cotangents were the keyword 'ct', so moments_vjp(x, ct=1.0) set
    both silently; they are ct and ct1 (the C names) and a missing one is an error."""
    x = np.array([1.0, 2.0, 4.0])
    want = pkg.moments_vjp(x, 1.0, 2.0)
    np.testing.assert_allclose(want, 1.0 / 3 + 2.0 * 2 * (x - x.mean()) / 3)
    np.testing.assert_allclose(pkg.moments_vjp(x, ct=1.0, ct1=2.0), want)
    np.testing.assert_allclose(pkg.moments_vjp(x, 1.0, ct1=2.0), want)
    with pytest.raises(TypeError):
        pkg.moments_vjp(x, ct=1.0)


def test_parameter_defaults_apply_in_python(pkg):
    """def scaled(x, scale=2.0, flag=False): the Python API fills in the defaults, as calling the Python function
    would (it said 'scaled() takes 3 arguments, 1 given'); a batched parameter of a vmap has none."""
    assert pkg.scaled(3.0) == 3.0 and pkg.scaled(3.0, flag=True) == 6.0 and pkg.scaled(3.0, 5.0, True) == 15.0
    np.testing.assert_allclose(pkg.scaled_vjp(3.0, flag=True, ct=1.0), (2.0, 3.0))
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(pkg.vscaled(x, np.array([3.0, 4.0]), True), [3.0, 8.0])
    np.testing.assert_allclose(pkg.vscaled(x, scale=np.array([3.0, 4.0])), x)
    with pytest.raises(TypeError, match="missing argument"):
        pkg.vscaled(x)


def test_read_only_out_arrays_are_refused(pkg):
    out = np.zeros(3)
    out.setflags(write=False)
    with pytest.raises(pkg.twice.CallError, match="read-only"):
        pkg.twice(np.ones(3), out=out)
    frozen = np.frombuffer(bytes(24), np.float64)
    with pytest.raises(pkg.twice.CallError, match="read-only"):
        pkg.twice(np.ones(3), out=frozen)
    assert bytes(frozen.tobytes()) == bytes(24)


@pytest.mark.parametrize("source, message", [
    ("no_such_pkg_ks.sub:sp", "cannot find module 'no_such_pkg_ks.sub'"),
    ("os.path:sp", "module 'os.path' has no Python source file"),
])
def test_unreadable_module_kernels_are_located_errors(tmp_path, capsys, source, message):
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "m"\n\n[kernels.sp]\npython = "{source}"\n\n'
                                            '[exports]\nsp = "sp"\n')
    assert main(["check", str(tmp_path / "manifest.toml")]) == 1
    err = capsys.readouterr().err
    assert "manifest.toml:" in err and message in err and "internal error" not in err


def test_failed_wheel_leaves_no_folder(tmp_path, capsys):
    pytest.importorskip("scikit_build_core")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "bad"\n\n[kernels.k]\npython = "nowhere.py:k"\n\n'
                                            '[exports]\nk = "k"\n')
    assert main(["wheel", str(tmp_path / "manifest.toml"), "-o", str(tmp_path / "wheels")]) == 1
    assert not (tmp_path / "wheels").exists()


def test_ctrl_c_is_a_message_not_a_traceback(monkeypatch, capsys):
    from ksbuild import cli

    def interrupted(_):
        raise KeyboardInterrupt
    monkeypatch.setitem(cli.COMMANDS, "check", interrupted)
    assert main(["check", "manifest.toml"]) == 130
    assert capsys.readouterr().err.strip() == "ksbuild: interrupted"


def test_sigterm_stops_the_build_and_its_compilers(tmp_path):
    """SIGTERM to `ksbuild package` left cmake and cc1plus running and a build folder in the cache; now the
    compilers stop with it (CMake runs in its own process group) and it exits 130, writing nothing."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT
    shutil.copytree(ROOT / "examples/gmm", tmp_path / "gmm")
    env = dict(os.environ, KSBUILD_CACHE=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "ksbuild", "package", str(tmp_path / "gmm/manifest.toml"), "-o",
                             str(tmp_path / "out")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def compilers():
        found = subprocess.run(["pgrep", "-f", f"cc1plus.*{tmp_path}"], capture_output=True, text=True).stdout
        return found.split()
    deadline = time.time() + 120
    while not compilers() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    if proc.poll() is not None:
        pytest.skip("the build finished before a compiler was seen")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "ksbuild: interrupted" in err
    time.sleep(0.5)
    assert compilers() == []
    assert not (tmp_path / "out").exists()


def test_sigterm_to_a_python_build_stops_its_compilers(tmp_path):
    """ksbuild.build from a Python program killed with SIGTERM left cc1plus running for half an hour (CMake runs
    in its own process group, and only the CLI stopped it): now the build stops its compilers too."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT
    shutil.copytree(ROOT / "examples/gmm", tmp_path / "gmm")
    env = dict(os.environ, KSBUILD_CACHE=str(tmp_path / "cache"))
    script = f"import ksbuild; ksbuild.build({str(tmp_path / 'gmm/manifest.toml')!r})"
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def compilers():
        found = subprocess.run(["pgrep", "-f", f"cc1plus.*{tmp_path}"], capture_output=True, text=True).stdout
        return found.split()
    deadline = time.time() + 120
    while not compilers() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    if proc.poll() is not None:
        pytest.skip("the build finished before a compiler was seen")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    time.sleep(0.5)
    assert compilers() == []
