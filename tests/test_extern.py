"""External C functions (issue 32 item 4, Knossos's edef): ksbuild.extern, with and without the user's derivative rule.

Oracles: the C formulas written again in numpy (the compiled exports call the C functions), central differences of
the compiled values, and the kernel file run as PyTorch (the extern's Python body, torch's autograd through the same
rule). The Python bodies compute what the C functions do, so the reference interpreter (which runs the bodies) agrees
with the compiled code too.
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess

import numpy as np
import pytest
import torch
from conftest import ROOT

from ksbuild.errors import KsbuildError
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.vjp import grad_func, vjp_func
from ksbuild.transforms.vmap import vmap_func

C_SOURCE = """\
#include <math.h>
#include <stdint.h>

double softsign(double x) { return x / (1.0 + fabs(x)); }

double ks_powi(double x, int64_t n) {
    double r = 1.0;
    for (int64_t i = 0; i < n; ++i) r *= x;
    return r;
}
"""

SOURCE = '''\
import ksbuild


@ksbuild.extern(sources=["ext.c"])
def softsign(x: float) -> float:
    return x / (1.0 + abs(x))


@softsign.defjvp
def softsign_jvp(x: float, dx: float) -> tuple[float, float]:
    d = 1.0 + abs(x)
    return softsign(x), dx / (d * d)


@ksbuild.extern(sources=["ext.c"], c_name="ks_powi")
def powi(x: float, n: int) -> float:
    r = 1.0
    for _ in range(n):
        r = r * x
    return r


def powi_fwd(x: float, n: int) -> tuple[float, float]:
    return powi(x, n), n * powi(x, n - 1)        # the rules call the extern too


def powi_bwd(d: float, g: float) -> float:
    return d * g


powi.defvjp(powi_fwd, powi_bwd)


@ksbuild.extern(sources=["ext.c"], c_name="softsign")
def no_rule(x: float) -> float:
    return x / (1.0 + abs(x))


def loss(x: "float[n]") -> float:
    s = 0.0
    for i in range(x.shape[0]):
        s = s + softsign(x[i]) * powi(x[i], 3)
    return s


def pair(x: float, y: float) -> "float[2]":
    return torch.stack([softsign(x * y), powi(x, 2) + y])


def plain(x: "float[n]") -> float:
    s = 0.0
    for i in range(x.shape[0]):
        s = s + no_rule(x[i])
    return s
'''.replace("import ksbuild\n", "import torch\n\nimport ksbuild\n", 1)

EXPORTS = {"f": "softsign", "vf": "vmap(softsign)", "g": "grad(softsign)", "j": "jvp(softsign)",
           "v": "vjp(softsign)", "vg": "vmap(grad(softsign))", "vp": "vmap(powi, in_axes=(0, None))",
           "gp": "grad(powi)", "jp": "jvp(powi)", "l": "loss", "gl": "grad(loss)", "vl": "vmap(loss)",
           "vgl": "vmap(grad(loss))", "jf": "jacfwd(pair, argnums=(0, 1))", "p": "plain"}
XS = np.array([-3.0, -0.5, 0.25, 2.0])


def softsign(x):
    return x / (1.0 + np.abs(x))


def d_softsign(x):
    return 1.0 / (1.0 + np.abs(x)) ** 2


def _write(folder, source: str = SOURCE) -> None:
    (folder / "ext.c").write_text(C_SOURCE)
    (folder / "ext_kernels.py").write_text(source)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("extern")
    _write(d)
    return d


@pytest.fixture(scope="module")
def py(folder):
    """The kernel file run as Python (PyTorch)."""
    spec = importlib.util.spec_from_file_location("ext_kernels_py", folder / "ext_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pkg(folder):
    import ksbuild

    kernels = sorted({"softsign", "powi", "loss", "pair", "plain"})
    lines = ["[package]", 'name = "ext"', 'version = "0.1.0"', "", "[build]", 'dtype = "float64"', ""]
    for name in kernels:
        lines += [f"[kernels.{name}]", f'python = "ext_kernels.py:{name}"', ""]
    lines += ["[exports]"] + [f'{k} = "{v}"' for k, v in EXPORTS.items()]
    (folder / "manifest.toml").write_text("\n".join(lines) + "\n")
    return ksbuild.build(folder / "manifest.toml", out=folder / "dist")


def ir(folder, name: str):
    return compile_python_kernel(folder / "ext_kernels.py", name, "f64")


def close(got, want, what: str = "", rtol: float = 1e-9) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64), rtol=rtol,
                               atol=1e-12, err_msg=what)


def torch_grad(fn, *args) -> list[np.ndarray]:
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in args]
    fn(*ts).sum().backward()
    return [t.grad.numpy() for t in ts]


def fd(fn, x, h: float = 1e-6):
    """Central differences of a scalar function of a vector."""
    return np.array([(fn(x + h * e) - fn(x - h * e)) / (2 * h) for e in np.eye(len(x))])


# ---- compiled: the C functions run, with the user's rules for the derivatives -------------------------------------

def test_compiled_values_are_the_c_functions(pkg):
    close([pkg.f(x) for x in XS], softsign(XS), "softsign")
    close(pkg.vf(XS), softsign(XS), "vmap(softsign)")
    close(pkg.vp(XS, 3), XS ** 3, "vmap(powi)")
    close(pkg.l(XS), np.sum(softsign(XS) * XS ** 3), "loss")
    close(pkg.vl(np.stack([XS, 2 * XS])), [pkg.l(XS), pkg.l(2 * XS)], "vmap(loss)")


def test_compiled_derivatives_use_the_rules(pkg, py):
    want = d_softsign(XS)
    close([pkg.g(x) for x in XS], want, "grad")
    close([pkg.j(x, 2.0) for x in XS], 2.0 * want, "jvp")
    close([pkg.v(x, -1.5) for x in XS], -1.5 * want, "vjp")
    close(pkg.vg(XS), want, "vmap(grad)")
    close(pkg.vg(XS), torch_grad(py.softsign, XS)[0], "vmap(grad) against torch")
    close([pkg.gp(x, 3) for x in XS], 3 * XS ** 2, "grad(powi)")
    close([pkg.jp(x, 3, 0.5) for x in XS], 0.5 * 3 * XS ** 2, "jvp(powi): bwd transposed")


def test_a_loop_and_vmap_over_it(pkg, py):
    x = XS.copy()
    close(pkg.gl(x), fd(pkg.l, x), "grad(loss) against finite differences", 1e-6)
    close(pkg.gl(x), torch_grad(py.loss, x)[0], "grad(loss) against torch")
    rows = np.stack([x, 0.5 * x, -x])
    close(pkg.vgl(rows), [pkg.gl(r) for r in rows], "vmap(grad(loss))")


def test_jacfwd(pkg):
    x, y = 0.7, -1.3
    jac = pkg.jf(x, y)
    want_x = [d_softsign(x * y) * y, 2 * x]
    want_y = [d_softsign(x * y) * x, 1.0]
    close(np.concatenate([np.ravel(j) for j in jac]), want_x + want_y, "jacfwd(pair)")


def test_the_c_function_is_called_in_the_loop(pkg, folder):
    """vmap gives a loop calling the C function per element, declared once at file scope with C linkage."""
    text = _rendered(folder).read_text()
    assert text.count('extern "C" double softsign(double);') == 1
    assert 'extern "C" double ks_powi(double, int64_t);' in text
    assert "::softsign(x_i)" in text
    assert text.index('extern "C" double softsign') < text.index("namespace KS_VARIANT {")


def _rendered(folder):
    from ksbuild.cli import main as cli_main

    assert cli_main(["render", str(folder / "manifest.toml"), "-o", str(folder / "proj")]) == 0
    return folder / "proj/src/ext.cpp"


def test_a_function_without_a_rule_is_compiled(pkg):
    close(pkg.p(XS), np.sum(softsign(XS)), "plain")


# ---- the reference interpreter runs the Python body ----------------------------------------------------------------

def test_interpreter_runs_the_python_body(folder):
    close(eval_func(ir(folder, "loss"), [XS])[0], np.sum(softsign(XS) * XS ** 3))
    close(eval_func(grad_func(ir(folder, "loss")), [XS])[0], fd(lambda x: np.sum(softsign(x) * x ** 3), XS),
          rtol=1e-6)
    f = vmap_func(jvp_func(ir(folder, "softsign")), [True, True], "n")[0]
    close(eval_func(f, [XS, np.ones(4)])[1], d_softsign(XS))
    close(eval_func(vjp_func(ir(folder, "powi")), [2.0, 3, 1.0])[0], 12.0)


def test_a_body_of_ellipsis_is_an_error_when_interpreted(tmp_path):
    _write(tmp_path, "import ksbuild\n\n\n@ksbuild.extern(sources=[\"ext.c\"])\ndef softsign(x: float) -> float:\n"
                     "    ...\n")
    f = compile_python_kernel(tmp_path / "ext_kernels.py", "softsign", "f64")
    with pytest.raises(KsbuildError, match="Python body returns nothing"):
        eval_func(f, [1.0])


def test_the_file_run_as_torch_uses_the_rules(py):
    """ksbuild.extern in Python: the body runs, and torch's autograd uses the rule (powi_bwd's d * g)."""
    close(py.softsign(0.5), softsign(0.5))
    close(torch_grad(lambda x: py.powi(x, 3), XS)[0], 3 * XS ** 2)
    assert py.powi.c_name == "ks_powi" and py.softsign.sources == ("ext.c",)


# ---- located errors ---------------------------------------------------------------------------------------------

def _error(tmp_path, source: str, name: str, transform=None) -> KsbuildError:
    _write(tmp_path, "import ksbuild\n\n\n" + source)
    with pytest.raises(KsbuildError) as e:
        f = compile_python_kernel(tmp_path / "ext_kernels.py", name, "f64")
        if transform is not None:
            transform(f)
    assert e.value.loc is not None and e.value.loc.file.endswith("ext_kernels.py"), e.value
    return e.value


def test_no_rule_under_grad_is_an_error_at_the_call(folder):
    with pytest.raises(KsbuildError) as e:
        grad_func(ir(folder, "plain"))
    assert "'no_rule' is an external C function with no derivative rule" in e.value.message
    assert "@no_rule.defjvp" in e.value.hint
    assert (e.value.loc.line, e.value.loc.col) == (SOURCE.splitlines().index("        s = s + no_rule(x[i])") + 1, 16)


def test_a_tensor_argument_is_an_error(tmp_path):
    e = _error(tmp_path, '@ksbuild.extern()\ndef f(x: "float[n]") -> float:\n    return 1.0\n', "f")
    assert "float, int and bool scalars only" in e.message and (e.loc.line, e.loc.col) == (5, 9)
    e = _error(tmp_path, '@ksbuild.extern()\ndef f(x: float) -> "float[2]":\n    return 1.0\n', "f")
    assert "must return one float" in e.message and e.loc.line == 5


def test_a_missing_source_file_is_an_error(tmp_path):
    e = _error(tmp_path, '@ksbuild.extern(sources=["ext.c", "nope.c"])\ndef f(x: float) -> float:\n'
                         "    return x\n", "f")
    assert "no file 'nope.c'" in e.message and (e.loc.line, e.loc.col) == (4, 34)


def test_a_bad_c_name_is_an_error(tmp_path):
    for bad in ('"2bad"', '"my-fn"', '"int"', '"new"', "1"):
        e = _error(tmp_path, f"@ksbuild.extern(c_name={bad})\ndef f(x: float) -> float:\n    return x\n", "f")
        assert "c_name must be a C identifier" in e.message and (e.loc.line, e.loc.col) == (4, 23), bad


# ---- without sources: the app links the function -----------------------------------------------------------------

@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm")
def test_without_sources_the_app_links_it(tmp_path):
    """The library leaves the symbol to the app's linker; the Python API cannot load it, and says why."""
    from conftest import undefined_symbols

    import ksbuild

    (tmp_path / "k.py").write_text("import ksbuild\n\n\n@ksbuild.extern(c_name=\"app_scale\")\n"
                                   "def scale(x: float) -> float:\n    return 2.0 * x\n")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "appfn"\nversion = "0.1.0"\n\n'
                                            '[kernels.scale]\npython = "k.py:scale"\n\n[exports]\nvs = "vmap(scale)"\n')
    with pytest.raises(ImportError, match="calls the C function 'app_scale', which it does not define"):
        ksbuild.build(tmp_path / "manifest.toml", out=tmp_path / "dist")
    assert "app_scale" in undefined_symbols(tmp_path / "dist/lib/libappfn.a")


# ---- the example ---------------------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_example_packages_and_its_app_runs(tmp_path):
    from conftest import build_and_run_app

    from ksbuild.cli import main as cli_main

    assert cli_main(["package", str(ROOT / "examples/extern/manifest.toml"), "-o", str(tmp_path / "dist")]) == 0
    run = build_and_run_app(ROOT / "examples/extern/app", tmp_path / "dist", tmp_path / "app", "bessel_app")
    assert run.returncode == 0 and "ok:" in run.stdout, run.stdout + run.stderr


def test_the_library_defines_the_c_functions(folder, pkg):
    """The user's source is compiled into the library: it defines the C functions, by their C names."""
    log = subprocess.run(["nm", str(next((folder / "dist/lib").glob("*.a")))], capture_output=True, text=True).stdout
    assert " T softsign" in log and " T ks_powi" in log
