"""The torch.export frontend (`torch = "file.py:make"` kernels): models of tests/torch_export_models.py
compiled with ksbuild.build. Oracles: the torch modules themselves (values) and torch.autograd
(vjp with respect to the inputs, and to the parameters when weights = "external")."""
from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import DEBUG, ROOT, captures_once

torch = pytest.importorskip("torch")
import torch_export_models as models  # noqa: E402

from ksbuild.errors import KsbuildError  # noqa: E402

MODELS_FILE = ROOT / "tests" / "torch_export_models.py"
TOL = dict(rtol=2e-4, atol=2e-5)


def _manifest(folder, name: str, kernels: dict[str, str], exports: dict[str, str], build: str = "") -> str:
    """A manifest in `folder` whose kernels are make functions of torch_export_models.py."""
    lines = ["[package]", f'name = "{name}"', "", "[build]", build, ""]
    for k, make in kernels.items():
        lines += [f"[kernels.{k}]", f'torch = "{MODELS_FILE}:{make}"', ""]
    lines += ["[exports]"] + [f'{e} = "{x}"' for e, x in exports.items()]
    path = folder / "manifest.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def captures():
    """torch.export's capture of each model of MODELS_FILE made once in this module: the packages' builds
    (ksbuild.build, in this process) take the same capture of the MLP and the CNN (the weights are embedded or
    made arguments by the importer, after the capture)."""
    yield from captures_once(MODELS_FILE)


@pytest.fixture(scope="module")
def pkg(tmp_path_factory, captures):
    """One package with every model and its vjp (weights embedded)."""
    import ksbuild
    folder = tmp_path_factory.mktemp("torch_models")
    kernels = {k: f"make_{k}" for k in models.MODELS}
    exports = {**{k: k for k in kernels}, **{f"{k}_vjp": f"vjp({k})" for k in kernels}}
    return ksbuild.build(_manifest(folder, "tmodels", kernels, exports), optimize=DEBUG)


@pytest.fixture(scope="module")
def pkg_external(tmp_path_factory, captures):
    """The MLP and the CNN with weights = "external": parameters and buffers are arguments."""
    import ksbuild
    folder = tmp_path_factory.mktemp("torch_models_ext")
    kernels = {"mlp": "make_mlp", "cnn": "make_cnn"}
    exports = {"mlp": "mlp", "mlp_vjp": "vjp(mlp)", "cnn_vjp": "vjp(cnn)"}
    return ksbuild.build(_manifest(folder, "tmodels_ext", kernels, exports, 'weights = "external"'), optimize=DEBUG)


def _inputs(name: str, batch: int, seed: int = 1) -> list:
    """Example inputs of a model with the batch dim set to `batch`."""
    _, args, dyn = models.MODELS[name]()
    spec = dyn[0] if isinstance(dyn, tuple) else next(iter(dyn.values()))
    axis = next(iter(spec))
    g = torch.Generator().manual_seed(seed)
    shape = list(args[0].shape)
    shape[axis] = batch
    return [torch.randn(*shape, generator=g)]


def _as_tuple(v) -> tuple:
    return v if isinstance(v, tuple) else (v,)


@pytest.mark.parametrize("name", list(models.MODELS))
@pytest.mark.parametrize("batch", [1, 6])
def test_values_match_torch(pkg, name, batch):
    module = models.MODELS[name]()[0].eval()
    xs = _inputs(name, batch)
    with torch.no_grad():
        want = _as_tuple(module(*xs))
    got = _as_tuple(pkg.exports[name](*[x.numpy() for x in xs]))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.detach().numpy(), **TOL)  # (detach: an enable_grad region inside)


@pytest.mark.parametrize("name", list(models.MODELS))
def test_vjp_matches_autograd(pkg, name):
    module = models.MODELS[name]()[0].eval()
    xs = [x.requires_grad_() for x in _inputs(name, 4)]
    outs = _as_tuple(module(*xs))
    g = torch.Generator().manual_seed(7)
    cts = [torch.randn(o.shape, generator=g) for o in outs]
    want = torch.autograd.grad(outs, xs, cts)
    got = _as_tuple(pkg.exports[f"{name}_vjp"](*[x.detach().numpy() for x in xs], *[c.numpy() for c in cts]))
    for gg, w in zip(got, want):
        np.testing.assert_allclose(gg, w.numpy(), **TOL)


def test_external_weights_are_arguments(pkg_external):
    """Parameters then buffers follow the inputs, named after their state-dict keys."""
    module = models.make_mlp()[0].eval()
    e = pkg_external.exports["mlp"]
    names = [a["name"] for a in e.ins]
    assert names == ["x"] + [k.replace(".", "_") for k, _ in module.named_parameters()]
    x = _inputs("mlp", 5)[0]
    params = [p.detach().numpy() for p in module.parameters()]
    with torch.no_grad():
        np.testing.assert_allclose(e(x.numpy(), *params), module(x).numpy(), **TOL)
    doubled = [2 * p for p in params]  # other weights, same compiled code
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(2)
        np.testing.assert_allclose(e(x.numpy(), *doubled), module(x).numpy(), **TOL)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_vjp_of_external_weights_matches_autograd(pkg_external, name):
    """Cotangents of the input and the parameters against torch.autograd; of the buffers (batch norm's
    running statistics, which torch does not differentiate) against central differences in float64."""
    module = models.MODELS[name]()[0].eval()
    params = dict(module.named_parameters())
    buffers = {k: v for k, v in module.named_buffers() if v.is_floating_point()}
    x = _inputs(name, 3)[0].requires_grad_()
    leaves = [x] + [v.detach().clone().requires_grad_() for v in params.values()]
    out = torch.func.functional_call(module, dict(zip(params, leaves[1:])), (x,))
    ct = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    want = list(torch.autograd.grad(out, leaves, ct)) + [_fd_grad(module, x, ct, k) for k in buffers]
    args = [v.detach().numpy() for v in leaves] + [v.numpy() for v in buffers.values()]
    got = pkg_external.exports[f"{name}_vjp"](*args, ct.numpy())
    assert len(got) == len(want) == len(pkg_external.exports[f"{name}_vjp"].ins) - 1
    for gg, w in zip(got, want):
        np.testing.assert_allclose(gg, w.numpy(), **TOL)


def _fd_grad(module, x, ct, key: str, h: float = 1e-6):
    """d <ct, module(x)> / d buffer `key` by central differences in float64."""
    m64 = copy.deepcopy(module).double()
    buf = dict(m64.named_buffers())[key]
    out = torch.zeros(buf.shape, dtype=torch.float64)
    with torch.no_grad():
        for i in range(buf.numel()):
            flat = buf.view(-1)
            flat[i] += h
            up = (m64(x.detach().double()) * ct).sum()
            flat[i] -= 2 * h
            down = (m64(x.detach().double()) * ct).sum()
            flat[i] += h
            out.view(-1)[i] = (up - down) / (2 * h)
    return out.float()


def test_dims_come_from_dim_names(pkg):
    """Dim("batch") is the export's first C argument; the LSTM takes it on axis 1."""
    for name in models.MODELS:
        assert pkg.exports[name].desc["dims"] == ["batch"]
    lstm = pkg.exports["lstm"].desc
    assert lstm["args"][1]["shape"] == [5, "batch", 3]


@pytest.mark.parametrize("name", list(models.ZOO))
def test_zoo_through_the_interpreter(name):
    """More layers and tensor ops, without a C++ build: the IR evaluated by the reference interpreter
    against the module (values) and its vjp against torch.autograd, at a batch size other than the example's."""
    from ksbuild.frontends.torch_export import compile_torch_kernel
    from ksbuild.ir.interp import eval_func
    from ksbuild.transforms.vjp import vjp_func
    f = compile_torch_kernel(MODELS_FILE.name, MODELS_FILE.parent, f"make_{name}", name)
    module, args, _ = models.ZOO[name]()
    module.eval()
    xs = [torch.cat([a, a[:2]]) for a in args]  # batch 5
    with torch.no_grad():
        want = _as_tuple(module(*xs))
    got = eval_func(f, [x.numpy() for x in xs])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.detach().numpy(), **TOL)  # (detach: an enable_grad region inside)
    if not any(x.is_floating_point() for x in xs):
        return
    leaves = [x.clone().requires_grad_() for x in xs]
    outs = [o for o in _as_tuple(module(*leaves)) if o.is_floating_point()]
    cts = [torch.randn(o.shape, generator=torch.Generator().manual_seed(k)) for k, o in enumerate(outs)]
    want = torch.autograd.grad(outs, leaves, cts)
    got = eval_func(vjp_func(f), [x.numpy() for x in xs] + [c.numpy() for c in cts])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-4 * float(w.abs().max()))


# ---- errors ---------------------------------------------------------------------------------------------

def _compile(tmp_path, make: str, extra: str = ""):
    from ksbuild.exports import build_exports
    from ksbuild.manifest import load_manifest
    path = _manifest(tmp_path, "bad", {"m": make}, {"m": "m"})
    if extra:
        path.write_text(path.read_text().replace("[kernels.m]\n", f"[kernels.m]\n{extra}\n"))
    return build_exports(load_manifest(path))


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(MODELS_FILE.read_text().splitlines(), 1) if text in line)


def test_unsupported_op_names_it_and_the_users_line(tmp_path):
    with pytest.raises(KsbuildError) as e:
        _compile(tmp_path, "make_unsupported")
    err = e.value
    assert "aten.cummax" in err.message and "not supported" in err.message
    assert err.loc.file == str(MODELS_FILE) and err.loc.line == _line_of("torch.cummax(x, dim=1)")
    assert "cummax" in err.loc.node and "torch.cummax" in str(err)


def test_unsupported_result_is_named(tmp_path):
    with pytest.raises(KsbuildError, match="result 1 of 'max_pool2d_with_indices'") as e:
        _compile(tmp_path, "make_indices")
    assert e.value.loc.line == _line_of("return_indices=True")


def test_make_errors_point_at_make(tmp_path):
    with pytest.raises(KsbuildError, match="make_raises\\(\\) raised ValueError: no weights here") as e:
        _compile(tmp_path, "make_raises")
    assert e.value.loc.file == str(MODELS_FILE) and e.value.loc.line == _line_of("no weights here")
    with pytest.raises(KsbuildError, match="must return an nn.Module first") as e:
        _compile(tmp_path, "make_not_a_module")
    assert e.value.loc.line == _line_of("return torch.randn(2), (torch.randn(2),)")  # its return
    with pytest.raises(KsbuildError, match="has no function 'make_nothing'"):
        _compile(tmp_path, "make_nothing")


def test_a_shape_error_in_forward_is_one_located_error(tmp_path, capfd):
    """(torch's logger printed its own 20-line traceback from fake_tensor before ksbuild's error.)"""
    with pytest.raises(KsbuildError, match="a and b must have same reduction dim") as e:
        _compile(tmp_path, "make_shape_bug")
    assert e.value.loc.file == str(MODELS_FILE) and e.value.loc.line == _line_of("return x @ x")
    err = capfd.readouterr().err
    assert "Traceback" not in err and "fake_tensor" not in err


def test_manifest_checks_torch_kernels(tmp_path):
    from ksbuild.manifest import load_manifest
    with pytest.raises(KsbuildError, match="has both 'python' and 'torch'"):
        _compile(tmp_path, "make_mlp", 'python = "x.py:f"')
    with pytest.raises(KsbuildError, match="'signature' is for Python kernels"):
        _compile(tmp_path, "make_mlp", 'signature = "(x: f32) -> f32"')
    path = _manifest(tmp_path, "bad", {"m": "make_mlp"}, {"m": "m"})
    path.write_text(path.read_text().replace(f"{MODELS_FILE}:make_mlp", "missing.py:make"))
    with pytest.raises(KsbuildError, match="python file 'missing.py' not found"):
        load_manifest(path)


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_torch_stays_optional():
    """Python kernels compile without importing torch; a torch kernel without torch is a clear error."""
    r = _run_python(f"""
        import sys
        from ksbuild.exports import build_exports
        from ksbuild.manifest import load_manifest
        build_exports(load_manifest("examples/relu3/manifest.toml"))
        assert "torch" not in sys.modules, "torch was imported"
        sys.modules["torch"] = None  # as if torch were not installed
        from pathlib import Path
        import tempfile
        d = Path(tempfile.mkdtemp())
        (d / "manifest.toml").write_text('[package]\\nname = "t"\\n[kernels.m]\\ntorch = "{MODELS_FILE}:make_mlp"\\n'
                                          '[exports]\\nm = "m"\\n')
        from ksbuild.errors import KsbuildError
        try:
            build_exports(load_manifest(d / "manifest.toml"))
        except KsbuildError as e:
            print(e)
    """)
    assert r.returncode == 0, r.stderr
    assert "needs PyTorch, which is not installed" in r.stdout and "manifest.toml:3" in r.stdout


# ---- examples/mnist: the trained model exported to a C library and used by a C++ app --------------------

def test_mnist_export_app_matches_torch(tmp_path, monkeypatch):
    """Train the example's model (weights saved in tmp), package it through `torch =`, build
    examples/mnist/app against it and classify 60 test digits: the app's log-probabilities and
    predictions must be the torch model's."""
    pytest.importorskip("sklearn", reason="the example trains on scikit-learn's bundled digits (extra 'examples')")
    from ksbuild.compile.cmake import cmake_exe
    from ksbuild.packaging.package import package
    monkeypatch.setenv("KSBUILD_MNIST_WEIGHTS", str(tmp_path / "model.pt"))
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "mnist"))
    import export as mnist_export
    import train as mnist_train
    dist = package(ROOT / "examples/mnist/manifest.toml", tmp_path / "dist", progress=lambda s: None)
    build = tmp_path / "app"
    for cmd in ([cmake_exe(), "-S", str(ROOT / "examples/mnist/app"), "-B", str(build), f"-DCMAKE_PREFIX_PATH={dist}"],
                [cmake_exe(), "--build", str(build)]):
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    _, _, x, y = mnist_train.digits()
    x, y = x[:60], y[:60]
    digits = tmp_path / "digits.txt"
    digits.write_text("".join(f"{int(c)} " + " ".join(str(int(round(v * 16))) for v in row) + "\n"
                              for c, row in zip(y, x.tolist())))
    run = subprocess.run([str(build / "mnist_app"), str(digits)], check=True, capture_output=True, text=True,
                         timeout=60)
    lines = [line for line in run.stdout.splitlines() if line.startswith("digit")]
    got = np.array([[float(v) for v in line.split("log-probabilities")[1].split()] for line in lines])
    predicted = [int(line.split("predicted")[1].split()[0]) for line in lines]
    with torch.no_grad():
        want = mnist_export.trained_model()(x).numpy()
    assert got.shape == (60, 10)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert predicted == list(want.argmax(1))
    assert np.mean(np.array(predicted) == y.numpy()) > 0.9  # it is a trained classifier


def test_every_handler_is_an_aten_overload():
    """The ATen table names real overloads (a typo would silently leave an op unsupported)."""
    from ksbuild.frontends.torch_export import aten_math, aten_nn, aten_shape, importer  # noqa: F401
    names = [k for k in importer.HANDLERS if isinstance(k, str)]
    assert len(names) > 200
    for k in names:
        _, op, overload = k.split(".")
        assert overload in getattr(torch.ops.aten, op).overloads(), k
