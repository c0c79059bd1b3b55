"""examples/onnx_mlp and examples/onnx_cnn: packaged, runtime-free, their C++ apps build and run
(training brings the loss down; the image gradient matches finite differences), their exports
agree with torch (values and autograd) and onnxruntime, and model.py reproduces the checked-in
models."""
from __future__ import annotations

import importlib.util
import platform
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import ROOT

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")

from ksbuild.cli import main as cli_main  # noqa: E402

EXAMPLES = ("onnx_mlp", "onnx_cnn")


def model_module(example: str):
    spec = importlib.util.spec_from_file_location(f"{example}_model", ROOT / "examples" / example / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The examples as `ksbuild package` builds them by default: portable, every x86-64 level."""
    out = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KSBUILD_HERE", "0")
        for ex in EXAMPLES:
            dest = tmp_path_factory.mktemp(ex) / "dist"
            assert cli_main(["package", str(ROOT / "examples" / ex / "manifest.toml"), "-o", str(dest)]) == 0
            out[ex] = dest
    return out


@pytest.mark.parametrize("example", EXAMPLES)
def test_library_is_runtime_free(installed, example):
    """The weights blob adds data, not dependencies: nm -u still shows only libm and mem* functions."""
    lib = installed[example] / "lib" / f"lib{example}.a"
    out = subprocess.run(["nm", "-u", str(lib)], capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[-1] for line in out.splitlines() if line.strip() and not line.endswith(":")}
    symbols.discard(f"{example}_data_blob")  # defined by the archive's own data object
    libm = re.compile(r"^(exp|log|log1p|expm1|sqrt|tanh|sin|cos|atan|atan2|pow|floor|fmod)f?$|^mem(cpy|set|move)$")
    assert all(libm.match(s) for s in symbols), sorted(symbols)
    blob = subprocess.run(["nm", str(lib)], capture_output=True, text=True, check=True).stdout
    assert f"{example}_data_blob" in blob


@pytest.mark.parametrize("example", EXAMPLES)
def test_prelude_code_is_private_to_the_package(installed, example):
    """The prelude's and the kernel layer's code a library defines is local to it: both are in ks::ks_kernels_<level>
    (ks/namespace.h), hidden, and the library's relocatable link makes hidden symbols local, so two packages built
    for different CPUs (or by two ksbuild versions) and linked into one app keep their own copies (the linker kept
    one, so a baseline library could run another's AVX code: red-team pass). The one exception is the dispatch's
    cached CPU level (ks::ks_<package>::cpu::cached, a unique symbol), in the package's own namespace."""
    lib = installed[example] / "lib" / f"lib{example}.a"
    out = subprocess.run(["nm", "-C", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    prelude = [line for line in out.splitlines() if "ks::" in line]
    assert prelude, "expected prelude template code in the library"
    own = re.compile(rf" ks::ks_{example}::cpu::cached$")
    # a lower-case symbol type (t, r, d, b), never global or weak
    local = re.compile(r"^\S* [trdb] ")
    shared = [x for x in prelude if not own.search(x) and not local.search(x)]
    assert not shared, shared
    weak = [line for line in out.splitlines() if re.search(r" [WVuv] ", line)]
    assert all(own.search(line) for line in weak), [x for x in weak if not own.search(x)]
    if platform.machine() == "x86_64":
        kernels = {m[0] for line in prelude for m in [re.search(r"ks::ks_kernels_x86_64(_v[34])?::", line)] if m}
        assert kernels == {f"ks::ks_kernels_x86_64{v}::" for v in ("", "_v3", "_v4")}, kernels


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
@pytest.mark.parametrize("example, expect", [("onnx_mlp", r"loss 0\.\d+ -> 0\.0\d+"),
                                             ("onnx_cnn", r"pixel  517: d logit / d pixel")])
def test_consumer_app(installed, tmp_path, example, expect):
    from ksbuild.compile.cmake import cmake_exe
    cmake = cmake_exe()
    app = ROOT / "examples" / example / "app"
    subprocess.run([cmake, "-S", str(app), "-B", str(tmp_path), f"-DCMAKE_PREFIX_PATH={installed[example]}"],
                   check=True, capture_output=True)
    subprocess.run([cmake, "--build", str(tmp_path)], check=True, capture_output=True)
    run = subprocess.run([str(tmp_path / f"{example}_app")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    assert re.search(expect, run.stdout), run.stdout


@pytest.fixture(scope="module")
def packages():
    import ksbuild
    return {ex: ksbuild.build(ROOT / "examples" / ex / "manifest.toml") for ex in EXAMPLES}


def test_mlp_matches_torch_and_onnxruntime(packages):
    pkg, mod = packages["onnx_mlp"], model_module("onnx_mlp")
    mlp = mod.make()
    x = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)
    y = pkg.mlp(x)
    np.testing.assert_allclose(y, mlp(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    sess = ort.InferenceSession(str(ROOT / "examples/onnx_mlp/mlp.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(y, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    yt = pkg.mlp(torch.tensor(x))  # torch in, torch out
    assert isinstance(yt, torch.Tensor) and np.allclose(yt.numpy(), y)


def test_mlp_loss_gradient_matches_torch_autograd(packages):
    pkg, mod = packages["onnx_mlp"], model_module("onnx_mlp")
    mlp = mod.make()
    x = np.random.default_rng(1).uniform(-1, 1, (16, 4)).astype(np.float32)
    t = mod.target_function(x).astype(np.float32)
    weights = [p.detach().numpy().copy() for p in mlp.parameters()]
    loss = mod.Loss(mlp)(torch.tensor(x), torch.tensor(t))
    loss.backward()
    assert pkg.loss(x, t, *weights) == pytest.approx(loss.item(), rel=1e-5)
    for got, p in zip(pkg.loss_grad(x, t, *weights), mlp.parameters()):
        np.testing.assert_allclose(got, p.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_cnn_and_its_vjp_match_torch(packages):
    pkg, mod = packages["onnx_cnn"], model_module("onnx_cnn")
    cnn = mod.make()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
    ct = rng.standard_normal((3, 10)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    y = cnn(xt)
    (y * torch.tensor(ct)).sum().backward()
    np.testing.assert_allclose(pkg.cnn(x), y.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pkg.cnn_vjp(x, ct), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("example, files", [("onnx_mlp", ["mlp.onnx", "mlp_loss.onnx"]), ("onnx_cnn", ["cnn.onnx"])])
def test_model_py_reproduces_the_checked_in_models(tmp_path, example, files):
    """Re-exporting with model.py gives models that compute what the checked-in ones compute."""
    (tmp_path / "app").mkdir()
    model_module(example).export(tmp_path)
    rng = np.random.default_rng(3)
    for f in files:
        a = ort.InferenceSession(str(ROOT / "examples" / example / f), providers=["CPUExecutionProvider"])
        b = ort.InferenceSession(str(tmp_path / f), providers=["CPUExecutionProvider"])
        feeds = {i.name: rng.standard_normal([2 if isinstance(d, str) else d for d in i.shape]).astype(np.float32)
                 for i in a.get_inputs()}
        for u, v in zip(a.run(None, feeds), b.run(None, feeds)):
            np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7)


@pytest.mark.skipif(not (shutil.which("aarch64-linux-gnu-g++") and shutil.which("qemu-aarch64")),
                    reason="needs aarch64-linux-gnu-g++ and qemu-aarch64 (scripts/install.sh installs them as root)")
def test_cnn_app_cross_compiled_for_aarch64(tmp_path):
    """The weights blob assembles for another architecture too: the aarch64 app prints what the host's does."""
    from ksbuild.compile.cmake import cmake_exe
    dist = tmp_path / "dist"
    assert cli_main(["package", str(ROOT / "examples/onnx_cnn/manifest.toml"), "--target", "aarch64-linux-gnu",
                     "-o", str(dist)]) == 0
    cmake = cmake_exe()
    subprocess.run([cmake, "-S", str(ROOT / "examples/onnx_cnn/app"), "-B", str(tmp_path / "b"),
                    f"-DCMAKE_PREFIX_PATH={dist}", f"-DCMAKE_TOOLCHAIN_FILE={dist}/share/onnx_cnn/toolchain.cmake"],
                   check=True, capture_output=True)
    subprocess.run([cmake, "--build", str(tmp_path / "b")], check=True, capture_output=True)
    run = subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", str(tmp_path / "b/onnx_cnn_app")],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "d logit / d pixel" in run.stdout, run.stdout + run.stderr
