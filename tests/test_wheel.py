"""`ksbuild wheel`: the GMM example as a wheel that works in a fresh venv with only numpy.

The wheel is built once per session (scikit-build-core, the `wheel` extra) from the example's kernel file with two of
its exports and their gradients (its ten exports compiled at every x86-64 level took 55 s of the suite's CPU; the
wheel's machinery is the same for two); the venv gets numpy and the wheel and nothing else, and its gradient is
compared with torch.autograd's here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from ksbuild.cli import main as cli_main
from ksbuild.packaging import runtime

GMM_MANIFEST = """[package]
name = "gmm"
version = "0.1.0"

[build]
dtype = "float64"

[kernels.gmm]
python = "gmm.py:gmm_objective"

[kernels.gmm_loop]
python = "gmm.py:gmm_objective_loop"

[exports]
gmm = "gmm"
gmm_grad = "grad(gmm, argnums=(0, 1, 2))"
gmm_loop = "gmm_loop"
gmm_loop_grad = "grad(gmm_loop, argnums=(0, 1, 2))"
"""
RELU3 = ROOT / "examples/relu3/manifest.toml"
CALL_IN_VENV = """
import importlib.util, json, sys
import numpy as np
import gmm

d = np.load(sys.argv[1])
args = (d["alphas"], d["means"], d["icf"], d["x"], float(d["gamma"]), float(d["m"]))
value = gmm.gmm(*args)
grads = gmm.gmm_grad(*args)
np.savez(sys.argv[2], value=value, d_alphas=grads[0], d_means=grads[1], d_icf=grads[2])
print(json.dumps({"ksbuild": importlib.util.find_spec("ksbuild") is not None,
                  "torch": importlib.util.find_spec("torch") is not None,
                  "module": gmm.__file__, "static_library": gmm.static_library(),
                  "include_dir": gmm.include_dir(), "all": gmm.__all__}))
"""

needs_skbuild = pytest.mark.skipif(importlib.util.find_spec("scikit_build_core") is None,
                                   reason="scikit-build-core is not installed (pip install -e '.[wheel]')")


@pytest.fixture(scope="session")
def gmm_manifest(tmp_path_factory) -> Path:
    """examples/gmm's kernel file with the manifest above beside it."""
    root = tmp_path_factory.mktemp("gmm_wheel")
    shutil.copy(ROOT / "examples/gmm/gmm.py", root / "gmm.py")
    (root / "manifest.toml").write_text(GMM_MANIFEST)
    return root / "manifest.toml"


@pytest.fixture(scope="session")
def gmm_wheel(tmp_path_factory, gmm_manifest) -> Path:
    if importlib.util.find_spec("scikit_build_core") is None:
        pytest.skip("scikit-build-core is not installed (pip install -e '.[wheel]')")
    out = tmp_path_factory.mktemp("wheels")
    assert cli_main(["wheel", str(gmm_manifest), "-o", str(out)]) == 0
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory, gmm_wheel) -> Path:
    """A venv (no system site-packages, not even pip) with numpy and the wheel installed."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--disable-pip-version-check", "numpy", str(gmm_wheel)], check=True)
    return python


def gmm_reference():
    spec = importlib.util.spec_from_file_location("gmm_reference", ROOT / "examples/gmm/reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_wheel_name_and_contents(gmm_wheel):
    assert gmm_wheel.name == f"gmm-0.1.0-py3-none-linux_{platform.machine()}.whl"
    with zipfile.ZipFile(gmm_wheel) as z:
        names = set(z.namelist())
        assert {"gmm/__init__.py", "gmm/_runtime.py", "gmm/include/gmm.h", "gmm/lib/libgmm.a",
                "gmm/lib/cmake/gmm/gmmConfig.cmake", "gmm/lib/pkgconfig/gmm.pc", "gmm/share/gmm/gmm.json",
                "gmm/share/gmm/python/libgmm_py.so", "gmm/share/gmm/target.json"} <= names
        # the runtime ships as a verbatim copy, not a fork
        assert z.read("gmm/_runtime.py") == Path(runtime.__file__).read_bytes()
        assert z.read("gmm/torch_ops.py") == Path(runtime.__file__).with_name("torch_ops.py").read_bytes()
        metadata = z.read("gmm-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Dist: numpy" in metadata
    assert not [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and
                ("ksbuild" in line or "torch" in line and "extra ==" not in line)]


def test_wheel_in_a_fresh_venv_matches_torch(fresh_venv, tmp_path):
    """The installed wheel (no ksbuild, no torch there) computes the GMM gradient torch.autograd computes."""
    ref = gmm_reference()
    data = ref.make_data(d=4, K=5, n=20, seed=7)
    np.savez(tmp_path / "in.npz", **{k: data[k] for k in ("alphas", "means", "icf", "x", "gamma", "m")})
    (tmp_path / "call.py").write_text(CALL_IN_VENV)
    # (without the caller's PYTHONPATH, which may name a checkout of ksbuild: the venv alone)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([str(fresh_venv), str(tmp_path / "call.py"), str(tmp_path / "in.npz"),
                           str(tmp_path / "out.npz")], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["ksbuild"] is False and info["torch"] is False
    assert Path(info["module"]).is_relative_to(fresh_venv.parent.parent)
    assert Path(info["static_library"]).is_file() and (Path(info["include_dir"]) / "gmm.h").is_file()
    assert info["all"][:4] == ["gmm", "gmm_grad", "gmm_loop", "gmm_loop_grad"]
    got = np.load(tmp_path / "out.npz")
    value, *grads = ref.gmm_grad_torch(data)
    assert float(got["value"]) == pytest.approx(value, rel=1e-10)
    for name, want in zip(("d_alphas", "d_means", "d_icf"), grads):
        np.testing.assert_allclose(got[name], want, rtol=1e-8, atol=1e-10)


def test_wheel_where_torch_is_installed(gmm_wheel, tmp_path):
    """The wheel's module imported next to torch (this venv, without ksbuild on the path): torch tensors in, torch
    tensors out, the values numpy's (the custom ops ship in the wheel; it said "No module named 'torch_ops'")."""
    pytest.importorskip("torch", reason="torch is not installed")
    site = tmp_path / "site"
    with zipfile.ZipFile(gmm_wheel) as z:
        z.extractall(site)
    data = tmp_path / "in.npz"
    rng = np.random.default_rng(0)
    np.savez(data, alphas=rng.normal(size=3), means=rng.normal(size=(3, 2)), icf=rng.normal(size=(3, 3)) * 0.1,
             x=rng.normal(size=(5, 2)), gamma=1.0, m=0.0)
    script = """
import sys
import numpy as np
import torch
import gmm
assert "ksbuild" not in sys.modules
d = np.load(sys.argv[1])
args = [d[k] for k in ("alphas", "means", "icf", "x")] + [float(d["gamma"]), float(d["m"])]
want = gmm.gmm(*args)
got = gmm.gmm(*[torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args])
assert isinstance(got, torch.Tensor), type(got)
np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
print("ok")
"""
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); exec({script!r})",
                        str(data)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_wheel_static_library_links_from_c(fresh_venv, tmp_path):
    """The header and static library in the installed wheel link into a C program (no C++ runtime)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    pkg = fresh_venv.parent.parent / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" \
        / "site-packages" / "gmm"
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "gmm.h"\n'
        "int main(void) {\n"
        "    double alphas[2] = {0.1, -0.2}, means[4] = {0.5, 0.1, 0.2, 0.3};\n"
        "    double icf[6] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};\n"
        "    double x[6] = {1, 2, 3, 4, 5, 6}, out = 0;\n"
        "    static _Alignas(16) unsigned char ws[1 << 16];\n"
        "    if (gmm_gmm_workspace_size(2, 2, 3, 3) > sizeof ws) return 3;\n"
        "    int status = gmm_gmm(2, 2, 3, 3, alphas, means, icf, x, 1.0, 0.0, &out, ws);\n"
        '    printf("%.17g\\n", out);\n    return status;\n}\n')
    exe = tmp_path / "main"
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{pkg / 'include'}", str(tmp_path / "main.c"),
                    str(pkg / "lib" / "libgmm.a"), "-lm", "-o", str(exe)], check=True)
    value = float(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)
    ref = gmm_reference()
    want = ref.gmm_objective_numpy([0.1, -0.2], np.reshape([0.5, 0.1, 0.2, 0.3], (2, 2)),
                                   np.reshape([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], (2, 3)),
                                   np.reshape([1, 2, 3, 4, 5, 6], (3, 2)), 1.0, 0.0)
    assert value == pytest.approx(want, rel=1e-12)


@needs_skbuild
def test_wheel_project_is_self_contained(tmp_path):
    """--project writes a folder pip or cibuildwheel can build: pyproject, CMake project, package files."""
    assert cli_main(["wheel", str(RELU3), "--project", str(tmp_path / "proj")]) == 0
    proj = tmp_path / "proj"
    pyproject = (proj / "pyproject.toml").read_text()
    assert 'build-backend = "scikit_build_core.build"' in pyproject and 'wheel.py-api = "py3"' in pyproject
    assert "[tool.cibuildwheel]" in pyproject
    for rel in ("CMakeLists.txt", "src/activations.cpp", "src/ks/prelude.h", "include/activations.h",
                "python/activations/__init__.py", "python/activations/_runtime.py", "README.md"):
        assert (proj / rel).is_file(), rel
    init = (proj / "python/activations/__init__.py").read_text()
    assert "vrelu3_vjp = _package.vrelu3_vjp" in init and "import ksbuild" not in init


def test_wheel_for_bare_metal_is_an_error(tmp_path, capsys):
    assert cli_main(["wheel", str(RELU3), "--target", "cortex-m4", "-o", str(tmp_path)]) == 1
    assert "target 'cortex-m4' has no operating system to load a Python module on" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@needs_skbuild
def test_cross_wheel_for_aarch64(tmp_path):
    """--target aarch64-linux-gnu gives a linux_aarch64 wheel whose shared library is aarch64 code."""
    if not shutil.which("aarch64-linux-gnu-g++"):
        pytest.skip("aarch64-linux-gnu-g++ not installed (scripts/install.sh installs g++-aarch64-linux-gnu)")
    assert cli_main(["wheel", str(RELU3), "--target", "aarch64-linux-gnu", "-o", str(tmp_path)]) == 0
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name == "activations-0.1.0-py3-none-linux_aarch64.whl"
    with zipfile.ZipFile(wheel) as z:
        so = z.read("activations/share/activations/python/libactivations_py.so")
        target = json.loads(z.read("activations/share/activations/target.json"))
    assert int.from_bytes(so[18:20], "little") == 183  # EM_AARCH64
    assert target["target"] == "aarch64-linux-gnu"


def test_second_wheel_comes_from_the_cache(gmm_wheel, gmm_manifest, tmp_path, capsys):
    """`ksbuild wheel` of an unchanged manifest reuses the cached wheel (no render, no compile): same bytes."""
    assert cli_main(["wheel", str(gmm_manifest), "-o", str(tmp_path)]) == 0
    assert "found a cached wheel" in capsys.readouterr().out
    assert (tmp_path / gmm_wheel.name).read_bytes() == gmm_wheel.read_bytes()
