"""Language gaps met porting ADBench and Knossos code (issue 32): each construct is accepted with torch's
meaning, checked against torch (values and torch.autograd vjps, through the reference interpreter and one
compiled package), or refused with a located error that names what to write instead.

Files with a UTF-8 byte-order mark; torch.t / .t() / .T of 0-d and 1-d tensors; the builtin sum of a tensor,
a list and a comprehension with a start; constants imported from a module next to the kernel file; slices whose
bounds a loop counter computes (an error with a mask to write instead); ksbuild's dev-loop decorators (and the
Knossos names, `import ksbuild as knossos`), `vrelu3.nnModule` without a call; `torch.Tensor` annotations.
"""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from conftest import DEBUG

import ksbuild
from ksbuild.errors import KsbuildError
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.transforms.vjp import vjp_func

torch = pytest.importorskip("torch")

BOM = "\ufeff"

CONSTS = "EPS = 1e-3\nSCALE = 2.5\nWEIGHTS = (0.5, -1.0, 2.0)\nTOL = EPS * 10\n"

KERNELS = '''\
import torch
from consts import EPS, WEIGHTS as W
import consts
import consts as c

TOL2 = 2 * consts.TOL


def t_vector(x: "float[n]") -> "float[n]":
    return torch.t(x) * 2.0 + x.t() + x.T


def t_matrix(x: "float[n, m]") -> "float[m, n]":
    return torch.t(x) + x.t()


def sum_tensor(x: "float[n]") -> float:
    return sum(x)


def sum_rows(x: "float[n, m]") -> "float[m]":
    return sum(x, 1.5)


def sum_start_kw(x: "float[n, m]") -> "float[m]":
    return sum(x, start=torch.ones(x.shape[1]))


def sum_ints(x: "float[n]", i: "i64[n]") -> "float[n]":
    return x * sum(i, 0.5)


def sum_forms(x: "float[n]") -> float:
    a = sum((x[j] * x[j] for j in range(x.shape[0])), 10.0)
    b = sum([x[0], x[1], x[2]], -1.0)
    rows = []
    for j in range(x.shape[0]):
        rows.append(x * x[j])
    return a + b + sum(rows).sum() + sum(x.shape)


def imported_constants(x: "float[n]") -> "float[n]":
    return (x + EPS) * consts.SCALE + c.WEIGHTS[1] * x * x + W[2] + TOL2


def prefix_sums(x: "float[n]") -> "float[n]":
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = torch.where(torch.arange(x.shape[0]) < i, x, 0.0).sum()
    return out
'''

# what prefix_sums means: the slice ksbuild refuses, run by torch
TORCH_PREFIX = '''\
def prefix_sums(x):
    out = torch.zeros(x.shape[0], dtype=x.dtype)
    for i in range(x.shape[0]):
        out[i] = x[:i].sum()
    return out
'''


def r(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape)


CASES = {
    "t_vector": lambda: (r(5),),
    "t_matrix": lambda: (r(3, 4),),
    "sum_tensor": lambda: (r(6),),
    "sum_rows": lambda: (r(4, 3),),
    "sum_start_kw": lambda: (r(4, 3),),
    "sum_ints": lambda: (r(4), np.array([3, -1, 7, 2])),
    "sum_forms": lambda: (r(5),),
    "imported_constants": lambda: (r(5),),
    "prefix_sums": lambda: (r(6),),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """k.py (with a byte-order mark, as ADBench's files have) and consts.py next to it."""
    root = tmp_path_factory.mktemp("gaps")
    (root / "consts.py").write_text(CONSTS)
    (root / "k.py").write_text(BOM + KERNELS, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def module(folder):
    """k.py run by Python (its BOM and its import of consts as Python has them), prefix_sums as torch's slice."""
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("gaps_k", folder / "k.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(folder))
    exec(TORCH_PREFIX, mod.__dict__)
    return mod


def torch_run(fn, args):
    """(torch's result, a cotangent, torch.autograd's vjp for the float arguments)."""
    ts = [torch.tensor(a, requires_grad=np.asarray(a).dtype.kind == "f") for a in args]
    floats = [t for t in ts if t.requires_grad]
    out = fn(*ts)
    out = out if isinstance(out, torch.Tensor) else torch.as_tensor(out)
    ct = np.random.default_rng(7).standard_normal(tuple(out.shape))
    grads = torch.autograd.grad(out, floats, torch.tensor(ct, dtype=out.dtype), allow_unused=True)
    grads = [np.zeros(tuple(t.shape)) if g is None else g.numpy() for t, g in zip(floats, grads)]
    return out.detach().numpy(), ct, grads


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreter_matches_torch(folder, module, name):
    args = CASES[name]()
    want, ct, grads = torch_run(getattr(module, name), args)
    f = compile_python_kernel(folder / "k.py", name, "f64")
    np.testing.assert_allclose(eval_func(f, list(args))[0], want, rtol=1e-12, atol=1e-12)
    for g, w in zip(eval_func(vjp_func(f), list(args) + [ct]), grads):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def package(folder):
    kernels = "".join(f'[kernels.{n}]\npython = "k.py:{n}"\n' for n in CASES)
    exports = "".join(f'{n} = "{n}"\n{n}_vjp = "vjp({n})"\n' for n in CASES)
    (folder / "manifest.toml").write_text(f'[package]\nname = "gaps"\n[build]\ndtype = "float64"\n'
                                          f'{kernels}[exports]\n{exports}')
    return ksbuild.build(folder / "manifest.toml", optimize=DEBUG)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_matches_torch(package, module, name):
    args = CASES[name]()
    want, ct, grads = torch_run(getattr(module, name), args)
    np.testing.assert_allclose(getattr(package, name)(*args), want, rtol=1e-11, atol=1e-11)
    got = getattr(package, f"{name}_vjp")(*args, ct if np.ndim(ct) else float(ct))
    for g, w in zip(got if isinstance(got, tuple) else (got,), grads):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-11)


def test_an_edit_of_the_constants_module_changes_the_build(folder, package):
    """The build's content key covers consts.py: editing it rebuilds, with the new value."""
    from ksbuild.manifest import load_manifest
    from ksbuild.packaging.package import content_hash

    m = load_manifest(folder / "manifest.toml")
    before = content_hash(m, "host")
    (folder / "consts.py").write_text(CONSTS.replace("SCALE = 2.5", "SCALE = 3.5"))
    try:
        assert content_hash(m, "host") != before
        x = np.array([1.0, -2.0])
        f = compile_python_kernel(folder / "k.py", "imported_constants", "f64")
        np.testing.assert_allclose(eval_func(f, [x])[0], (x + 1e-3) * 3.5 - x * x + 2.0 + 0.02)
    finally:
        (folder / "consts.py").write_text(CONSTS)


def test_relative_and_package_imports(tmp_path):
    """from .consts import X, from . import consts, and a dotted module in a folder next to the kernel."""
    (tmp_path / "consts.py").write_text("EPS = 0.25\n")
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "__init__.py").write_text("")
    (tmp_path / "params" / "adam.py").write_text("from consts import EPS\nBETA = 0.5 + EPS\n")
    (tmp_path / "k.py").write_text("from .consts import EPS\nfrom . import consts as c\nfrom params.adam import BETA\n"
                                   "import params.adam as adam\n\n\ndef f(x: float) -> float:\n"
                                   "    return x * EPS + c.EPS + BETA + adam.EPS\n")
    f = compile_python_kernel(tmp_path / "k.py", "f", "f64")
    assert float(eval_func(f, [2.0])[0]) == 2.0 * 0.25 + 0.25 + 0.75 + 0.25


ERRORS = {  # kernel source (the line of the error marked # <-), message part, hint part
    "slice bound from a loop counter": ('''\
def f(x: "float[n]") -> float:
    s = 0.0
    for i in range(x.shape[0]):
        s = s + x[:i].sum()  # <-
    return s
''', "the slice bound 'i' is computed when the kernel runs", "torch.where(torch.arange(x.shape[0]) < i, x, 0.0)"),
    "slice assignment from a loop counter": ('''\
def f(x: "float[n, m]") -> "float[n, m]":
    y = x.clone()
    for i in range(x.shape[0]):
        y[i:, :] = 0.0  # <-
    return y
''', "the slice bound 'i'", "y = torch.where(torch.arange(y.shape[0])[:, None] >= i, value, y)"),
    "a function from the constants module": ('''\
from consts import helper


def f(x: float) -> float:
    return helper(x)  # <-
''', "'helper' is imported from consts", "define helper in k.py"),
    "a name the constants module lacks": ('''\
import consts


def f(x: float) -> float:
    return x + consts.NOPE  # <-
''', "'NOPE' is not a constant of the module consts", "constants of consts: EPS"),
    "a constant of a module that is not next to the file": ('''\
from elsewhere import EPS


def f(x: float) -> float:
    return x + EPS  # <-
''', "'EPS' is imported from elsewhere", "put elsewhere.py next to k.py"),
    "a decorator that is not ksbuild's": ('''\
import functools


@functools.lru_cache  # <-
def f(x: float) -> float:
    return x
''', "unsupported decorator '@functools.lru_cache'", "@ksbuild.elementwise"),
    "Knossos itself": ('''\
import ksc.torch_frontend as knossos


@knossos.elementwise  # <-
def f(x: float) -> float:
    return x
''', "unsupported decorator '@knossos.elementwise'", "import ksbuild as knossos"),
    "a call of a mapped kernel": ('''\
import ksbuild


@ksbuild.vmap
def g(x: float) -> float:
    return x * 2.0


def f(x: "float[n]") -> "float[n]":
    return g(x)  # <-
''', "'g' is decorated with @ksbuild.vmap", "g = ksbuild.vmap(g_scalar)"),
    "torch.Tensor without a signature": ('''\
import torch


def f(x: torch.Tensor) -> torch.Tensor:  # <-
    return x * 2.0
''', "'torch.Tensor' gives no dtype and shape", 'x: "float[n, d]"'),
    "t() of a 3-d tensor": ('''\
import torch


def f(x: "float[a, b, c]") -> "float[b, a, c]":
    return torch.t(x)  # <-
''', ".T is supported on matrices", "permute"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_refused_with_a_located_error_naming_the_fix(tmp_path, case):
    source, message, hint = ERRORS[case]
    (tmp_path / "consts.py").write_text("EPS = 1.0\n")
    (tmp_path / "k.py").write_text(source)
    with pytest.raises(KsbuildError) as e:
        compile_python_kernel(tmp_path / "k.py", "f", "f64")
    line = next(k for k, text in enumerate(source.splitlines(), 1) if "# <-" in text)
    assert (e.value.loc.file, e.value.loc.line) == (str(tmp_path / "k.py"), line), str(e.value)
    assert message in e.value.message, str(e.value)
    assert hint in (e.value.hint or ""), str(e.value)


KNOSSOS = '''\
import torch
import ksbuild as knossos


@knossos.elementwise
def vrelu3(x: float) -> float:
    if x < 0.0:
        return 0.0
    elif x < 1.0:
        return 1 / 3 * x ** 3
    else:
        return x - 2 / 3


@knossos.register
def scaled(x: "float[n]", a: float) -> "float[n]":
    return x * a


def relu3_where(x):
    return torch.where(x < 0.0, 0.0, torch.where(x < 1.0, x ** 3 / 3, x - 2 / 3))
'''


@pytest.fixture(scope="module")
def knossos(tmp_path_factory):
    root = tmp_path_factory.mktemp("knossos")
    (root / "knossos_style.py").write_text(KNOSSOS)
    spec = importlib.util.spec_from_file_location("knossos_style", root / "knossos_style.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_knossos_decorators_in_the_dev_loop(knossos):
    """@knossos.elementwise (ksbuild.elementwise) maps over any shape; @knossos.register is ksbuild.kernel."""
    assert isinstance(knossos.vrelu3, ksbuild.Kernel) and knossos.vrelu3.expression == "vmap(vrelu3)"
    x = torch.linspace(-2.0, 2.0, 12, dtype=torch.float64).reshape(3, 4).requires_grad_()
    y = knossos.vrelu3(x)
    want = knossos.relu3_where(x)
    torch.testing.assert_close(y, want)
    (g,) = torch.autograd.grad(y.sum(), x)
    (w,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(g, w)
    v = torch.tensor([1.0, -2.0], dtype=torch.float64)
    torch.testing.assert_close(knossos.scaled(v, 3.0), v * 3.0)


def test_nnModule_without_a_call_as_the_seeds_write_it(knossos):
    """nn.Sequential(OrderedDict([..., ('activation1', vrelu3.nnModule), ...])): a Module, as Knossos's was;
    vrelu3.nnModule() is the same module, so ksbuild's own form keeps working."""
    from collections import OrderedDict

    nn = torch.nn
    torch.manual_seed(0)
    act = knossos.vrelu3.nnModule
    assert isinstance(act, nn.Module) and act() is act
    model = nn.Sequential(OrderedDict([("fc1", nn.Linear(6, 5)), ("activation1", knossos.vrelu3.nnModule),
                                       ("fc2", nn.Linear(5, 2)), ("activation2", knossos.vrelu3.nnModule())]))
    x = torch.randn(4, 6)
    with torch.no_grad():
        want = knossos.relu3_where(model.fc2(knossos.relu3_where(model.fc1(x))))
    torch.testing.assert_close(model(x), want)


def _kernel_f(folder, source: str, more: str):
    """The IR of kernel f of `source` (k.py), its manifest's [kernels.f] table ending in `more`."""
    from ksbuild.exports import compile_kernel
    from ksbuild.manifest import load_manifest
    (folder / "k.py").write_text(source)
    (folder / "manifest.toml").write_text(f'[package]\nname = "tt"\n[kernels.f]\npython = "k.py:f"\n{more}'
                                          '[exports]\nf = "f"\n')
    m = load_manifest(folder / "manifest.toml")
    return compile_kernel(m, m.kernels["f"])


def test_torch_tensor_annotations_with_a_signature(tmp_path):
    """torch.Tensor annotations say nothing of dtype and shape: a manifest signature gives them, and the results
    (no `->` in the signature) are what the kernel returns."""
    f = _kernel_f(tmp_path, "import torch\n\n\ndef f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:\n"
                            "    return torch.tanh(x @ w)\n", 'signature = "(x: f64[n, d], w: f64[d, m])"\n')
    x, w = r(3, 2), r(2, 4, seed=1)
    np.testing.assert_allclose(eval_func(f, [x, w])[0], np.tanh(x @ w), rtol=1e-12)


def test_a_helper_annotated_torch_tensor_takes_its_callers_types(tmp_path):
    """A helper's torch.Tensor parameters (`def attention(q: torch.Tensor, ...)` called by the kernel) take the types
    of the arguments of each call, as torch does (it was "gives no dtype and shape" although the call gives both);
    the values and the vjp against torch's."""
    f = _kernel_f(tmp_path, "import torch\n\n\ndef attend(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:\n"
                            "    return torch.softmax(q @ k.T, dim=1) @ k\n\n\n"
                            "def f(q: \"float[n, d]\", k: \"float[m, d]\") -> \"float\":\n"
                            "    return (attend(q, k) ** 2).sum() + attend(k, q).sum()\n",
                  '[build]\ndtype = "float64"\n')
    q, k = r(3, 2), r(4, 2, seed=1)

    def reference(q, k):
        def attend(a, b):
            return torch.softmax(a @ b.T, dim=1) @ b
        return (attend(q, k) ** 2).sum() + attend(k, q).sum()

    tq, tk = torch.tensor(q, requires_grad=True), torch.tensor(k, requires_grad=True)
    want = reference(tq, tk)
    np.testing.assert_allclose(eval_func(f, [q, k])[0], want.item(), rtol=1e-12)
    got = eval_func(vjp_func(f), [q, k, np.float64(1.0)])
    for g, e in zip(got[-2:], torch.autograd.grad(want, (tq, tk))):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-10, atol=1e-12)


DEV_TENSOR = '''\
import torch


def affine(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w + b)


def scale(x: torch.Tensor, a: float) -> torch.Tensor:
    return x * a
'''


def test_torch_tensor_annotations_in_the_dev_loop(tmp_path):
    """ksbuild.kernel of a torch.Tensor-annotated function takes its parameter types from the call: one build per
    dtype and pattern of shapes, autograd through the generated vjp, against the function run by torch."""
    (tmp_path / "dev_tensor.py").write_text(DEV_TENSOR)
    spec = importlib.util.spec_from_file_location("dev_tensor", tmp_path / "dev_tensor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    k = ksbuild.kernel(mod.affine)
    for n in (3, 5):  # two batch sizes, one build
        x = torch.randn(n, 4, dtype=torch.float64, requires_grad=True)
        w = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
        b = torch.randn(2, dtype=torch.float64, requires_grad=True)
        y = k(x, w, b)
        torch.testing.assert_close(y, mod.affine(x, w, b))
        got = torch.autograd.grad(y.sum(), (x, w, b))
        want = torch.autograd.grad(mod.affine(x, w, b).sum(), (x, w, b))
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
    assert len(k._packages) == 1
    s = ksbuild.kernel(mod.scale)
    x32 = torch.randn(2, 3)
    torch.testing.assert_close(s(x32, 2.0), x32 * 2.0)
    assert s.build("float32", "(x: f32[d0, d1], a: f32)").exports["fn"] is not None
