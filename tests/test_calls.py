"""Calls stay calls: a helper kernel whose values are all scalars (prims/control.py keeps_call) is a function of its
own in the C++ (`detail::softplus`, codegen/helpers.py), and under jvp, vjp and vmap its call is a call of its
transformed callee (jvp_softplus; fwd_softplus and bwd_softplus; vmap_softplus), each written once however often
it is called. A helper with tensors stays a call when it is large enough (prims/control.py call_params): `big`
below, and examples/gmm's helpers with the size rule off.

Oracles: the reference interpreter on the same exports built with every call inlined first (the path every
transformation took before calls stayed calls), and the interpreter on the export's own IR (with its calls)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import DEBUG, build_kernel_file

from ksbuild.exports import apply_transform, compile_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.manifest import load_manifest
from ksbuild.transforms.inline_calls import inline_calls

KERNELS = '''import math
import torch


def softplus(x: float) -> float:
    if x > 20.0:
        return x
    return math.log(1.0 + math.exp(x))


def pair(a: float, b: float):
    return a * b, a + b


def two(x: float, y: float) -> float:
    detail = softplus(x)  # (a local named like the namespace: `detail::` looks up namespaces and types only)
    return detail * softplus(y) + softplus(x * y)


def nested(x: float, y: float) -> float:
    p, q = pair(x, y)
    r, s = pair(p, softplus(q))
    return r + s * softplus(r)


def looped(x: "float[n]", y: float) -> float:
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            s = s + softplus(x[i] * y)
        else:
            s = s - softplus(y) * x[i]
    return s


def mixed(x: "float[n]", y: float) -> "float[n]":
    return torch.sin(x) * softplus(y)
'''

EXPORTS = {
    "two": "two", "two_jvp": "jvp(two)", "two_vjp": "vjp(two)", "two_grad": "grad(two)",
    "two_hess": "jvp(grad(two))", "vtwo": "vmap(two)", "vtwo_vjp": "vjp(vmap(two))", "vtwo_grad": "vmap(grad(two))",
    "two_fwd": "fwd(two)", "two_bwd": "bwd(two)",
    "nested": "nested", "nested_jvp": "jvp(nested)", "nested_grad": "grad(nested)",
    "looped": "looped", "looped_jvp": "jvp(looped)", "looped_grad": "grad(looped)",
    "mixed": "mixed", "mixed_vjp": "vjp(mixed)",
}
MANIFEST = "\n".join(['[package]', 'name = "calls"', '[build]', 'dtype = "float64"']
                     + [f'[kernels.{k}]\npython = "k.py:{k}"' for k in ("two", "nested", "looped", "mixed")]
                     + ['[exports]'] + [f'{k} = "{v}"' for k, v in EXPORTS.items()]) + "\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("calls")
    pkg, _ = build_kernel_file(root, KERNELS, MANIFEST, "calls_k", DEBUG)
    return pkg, root


def _inlined_reference(root, export: str):
    """The export built with every call inlined before its transformations, as a function of numpy inputs."""
    m = load_manifest(root / "manifest.toml")
    spec = m.exports[export]
    kernels = {name: inline_calls(compile_kernel(m, k)) for name, k in m.kernels.items()}
    f = apply_transform(spec.expr, kernels, spec.loc)
    return lambda *args: eval_func(f, list(args))


def _args(export: str, rng):
    n = 5
    scalars = {"two": 2, "two_fwd": 2, "two_jvp": 4, "two_vjp": 3, "two_grad": 2, "two_hess": 4, "nested": 2,
               "nested_jvp": 4, "nested_grad": 2}
    if export in scalars:
        return [float(v) for v in rng.uniform(-2, 2, scalars[export])]
    if export in ("vtwo", "vtwo_grad"):
        return [rng.uniform(-2, 2, n), rng.uniform(-2, 2, n)]
    if export == "vtwo_vjp":
        return [rng.uniform(-2, 2, n) for _ in range(3)]
    if export in ("looped", "looped_grad", "mixed"):
        return [rng.uniform(-2, 2, n), 0.7]
    if export == "looped_jvp":
        return [rng.uniform(-2, 2, n), 0.7, rng.uniform(-1, 1, n), 0.3]
    return [rng.uniform(-2, 2, n), 0.7, rng.uniform(-1, 1, n)]  # mixed_vjp


@pytest.mark.parametrize("export", [e for e in EXPORTS if e != "two_bwd"])
def test_compiled_calls_equal_the_interpreter_with_everything_inlined(built, export):
    pkg, root = built
    args = _args(export, np.random.default_rng(len(export)))
    got = getattr(pkg, export)(*args)
    want = _inlined_reference(root, export)(*args)
    got = got if isinstance(got, tuple) else (got,)
    if export == "two_fwd":  # (its residuals are its own: bwd reads them)
        got, want = got[:1], want[:1]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)


def test_bwd_of_the_residuals_fwd_stored_is_the_vjp(built):
    pkg, root = built
    x, y, ct = 0.3, -1.2, 0.8
    got = pkg.two_bwd(x, y, *pkg.two_fwd(x, y)[1:], ct)
    want = _inlined_reference(root, "two_vjp")(x, y, ct)
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=1e-12)


def test_each_transformed_helper_is_one_static_function_called_from_every_use(built, tmp_path):
    from ksbuild.cli import main as cli_main
    _, root = built
    assert cli_main(["render", str(root / "manifest.toml"), "-o", str(tmp_path / "out")]) == 0
    cpp = (tmp_path / "out/src/calls.cpp").read_text()
    header = (tmp_path / "out/include/calls.h").read_text()
    for name in ("softplus", "jvp_softplus", "fwd_softplus", "bwd_softplus", "pair", "fwd_pair", "bwd_pair"):
        assert len(re.findall(rf"^static \w+ {name}\(", cpp, re.M)) == 1, name
        assert name + "(" not in header
    body = cpp[cpp.index("double calls_two(double x"):]
    body = body[:body.index("\n}\n")]
    assert body.count("detail::softplus(") == 3 and "ks::log" not in body
    grad = cpp[cpp.index("calls_two_vjp("):]
    grad = grad[:grad.index("\n}\n")]
    assert grad.count("detail::fwd_softplus(") == 2 and grad.count("detail::bwd_softplus(") == 3
    assert "ks::exp" not in grad


def test_vmap_inlines_a_small_helper_and_calls_a_large_one(built, tmp_path):
    """vmap keeps the call of a helper of at least BATCHED_CALL_EQNS_PER_ARRAY equations per array it passes (its
    batched arguments and results): the batched helper is a function of its own, emitted once; a smaller one
    (softplus; wave with one step fewer) is inlined, and so is the vmap of grad's forward half, whose residuals are
    an array per step (tests/test_vmap_calls.py runs the batched calls of small helpers with the rule off)."""
    from ksbuild.cli import main as cli_main
    from ksbuild.prims.control import BATCHED_CALL_EQNS_PER_ARRAY
    _, root = built
    assert cli_main(["render", str(root / "manifest.toml"), "-o", str(tmp_path / "out")]) == 0
    cpp = (tmp_path / "out/src/calls.cpp").read_text()
    vtwo = cpp[cpp.index("int calls_vtwo("):]
    vtwo = vtwo[:vtwo.index("\n}\n")]
    assert "vmap_softplus" not in cpp and "ks::log" in vtwo
    for steps, kept in ((BATCHED_CALL_EQNS_PER_ARRAY // 2, True), (BATCHED_CALL_EQNS_PER_ARRAY // 2 - 1, False)):
        cpp = _render_wave(tmp_path / f"big{steps}", steps)  # (4 equations a step, 2 arrays: y and the result)
        assert len(re.findall(r"^static void vmap_wave\(", cpp, re.M)) == kept, steps
        vboth = cpp[cpp.index("int big_vboth("):]
        assert vboth[:vboth.index("\n}\n")].count("detail::vmap_wave(") == 3 * kept
        assert "vmap_fwd_wave" not in cpp and "vmap_bwd_wave" not in cpp


def _render_wave(folder, steps: int) -> str:
    """The C++ of vmap and vmap of grad of a kernel calling, three times, a helper of `steps` steps."""
    from ksbuild.cli import main as cli_main
    folder.mkdir()
    body = "\n".join(f"    y = y * 0.5 + math.sin(y * {k}.0)" for k in range(steps))
    (folder / "k.py").write_text(f"import math\n\n\ndef wave(y: float) -> float:\n{body}\n    return y\n\n\n"
                                 "def both(x: float, y: float) -> float:\n    return wave(x) * wave(y) + wave(x * y)\n")
    (folder / "manifest.toml").write_text('[package]\nname = "big"\n[kernels.both]\npython = "k.py:both"\n'
                                          '[exports]\nvboth = "vmap(both)"\nvgrad = "vmap(grad(both))"\n')
    assert cli_main(["render", str(folder / "manifest.toml"), "-o", str(folder / "out")]) == 0
    return (folder / "out/src/big.cpp").read_text()


@pytest.mark.parametrize("export", ["two_vjp", "two_hess", "nested_grad", "looped_grad"])
def test_kept_calls_verify_and_round_trip_through_the_text_form(built, export):
    """The transformed IR keeps its calls (of fwd_/bwd_ callees), passes the verifier, and its text parses back to
    a function the interpreter gives the same values."""
    from ksbuild.ir.parser import parse_func
    from ksbuild.ir.printer import print_func
    from ksbuild.ir.verify import verify
    _, root = built
    m = load_manifest(root / "manifest.toml")
    spec = m.exports[export]
    kernels = {name: compile_kernel(m, k) for name, k in m.kernels.items()}
    f = apply_transform(spec.expr, kernels, spec.loc)
    verify(f)
    text = print_func(f)
    assert re.search(r"fn = func (bwd|jvp)_\w+\(", text), text
    args = _args(export, np.random.default_rng(1))
    for got, want in zip(eval_func(parse_func(text), list(args)), _inlined_reference(root, export)(*args)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)


# ---- a user's helper with tensors ------------------------------------------------------------------------------

def _big_kernels(steps: int) -> str:
    body = "\n".join(f"    z = torch.sin(z * {1 + k / 100} + y) * 0.9" for k in range(steps))  # (contracting)
    return (f"import torch\n\n\ndef big(x: \"float[n]\", y: float) -> \"float[n]\":\n    z = x\n{body}\n    return z\n\n\n"
            "def user(x: \"float[n]\", y: float) -> float:\n    a = big(x, y)\n    b = big(x * 2.0, y)\n"
            "    return torch.sum(a * b) + torch.sum(big(a + b, y))\n")


BIG_EXPORTS = {"user": "user", "user_jvp": "jvp(user)", "user_grad": "grad(user)", "vuser": "vmap(user, in_axes=(0, None))"}


@pytest.fixture(scope="module")
def big_built(tmp_path_factory):
    """A helper of 40 steps (160 equations) with one tensor argument and one tensor result: at least
    BATCHED_CALL_EQNS_PER_ARRAY (64) equations per array, so its calls stay calls. Built for 2 threads (the
    callees' loop nests run on them too: test_a_kept_callee_runs_its_loop_nests_on_the_threads)."""
    root = tmp_path_factory.mktemp("bigcalls")
    manifest = ('[package]\nname = "bigcalls"\n[build]\ndtype = "float64"\nthreads = 2\n[kernels.user]\n'
                'python = "k.py:user"\n'
                "[exports]\n" + "".join(f'{k} = "{v}"\n' for k, v in BIG_EXPORTS.items()))
    pkg, source = build_kernel_file(root, _big_kernels(40), manifest, "bigcalls_k", DEBUG)
    return pkg, source, root


def test_a_large_tensor_helper_is_one_function_called_from_every_use(big_built, tmp_path):
    """The helper is `static void big(n, x, y, out_z)`, called three times; jvp calls `jvp_big`; vmap over x alone
    calls the batched `vmap_big` (over x and y it would pass a third array, which 160 equations do not pay); grad inlines it (its forward half would write a residual array per step: 5-7 times slower
    as a call on cheap arithmetic, docs/architecture.md "Calls")."""
    from ksbuild.cli import main as cli_main
    _, _, root = big_built
    assert cli_main(["render", str(root / "manifest.toml"), "-o", str(tmp_path / "out")]) == 0
    cpp = (tmp_path / "out/src/bigcalls.cpp").read_text()

    def body(export):
        text = cpp[re.search(rf"^(extern \"C\" )?\w+ bigcalls_{export}\(", cpp, re.M).start():]
        return text[:text.index("\n}\n")]
    assert len(re.findall(r"^static void big\(int64_t n, const double\* x, double y, double\* \w+\)", cpp, re.M)) == 1
    assert body("user").count("detail::big(") == 3 and "sin(" not in body("user")
    assert body("user_jvp").count("detail::jvp_big") == 3
    assert "detail::vmap_big(" in body("vuser")
    assert "fwd_big" not in cpp and "detail::" not in body("user_grad") and "std::sin(" in body("user_grad")


def test_a_kept_callee_runs_its_loop_nests_on_the_threads(big_built, tmp_path):
    """With [build] threads = 2 the callees (big, jvp_big, vmap_big) split their loop nests over ks/pool.h's threads
    as the caller does (parallelize marks the nests of a call's callee too). user is a sum over lanes, so on 2^15
    lanes (a nest that large runs in parts) it equals the sum of its values on four quarters (which run on one
    thread, and which test_a_large_tensor_helper_called_gives_torchs_values checks against torch); so do its jvp,
    and vuser's rows."""
    from ksbuild.cli import main as cli_main
    pkg, _, root = big_built
    assert cli_main(["render", str(root / "manifest.toml"), "-o", str(tmp_path / "out")]) == 0
    cpp = (tmp_path / "out/src/bigcalls.cpp").read_text()
    for callee in ("big", "jvp_big", "vmap_big"):
        text = cpp[re.search(rf"^static void {callee}\(", cpp, re.M).start():]
        assert "ks::pool::run(2, " in text[:text.index("\n}\n")], callee
    rng = np.random.default_rng(4)
    x, y, dx = rng.uniform(-1, 1, 2**15), 0.3, rng.uniform(-1, 1, 2**15)
    quarters = list(zip(x.reshape(4, -1), dx.reshape(4, -1)))
    assert pkg.user(x, y) == pytest.approx(sum(pkg.user(q, y) for q, _ in quarters), rel=1e-12)
    want = sum(np.asarray(pkg.user_jvp(q, y, dq, 0.2)).item() for q, dq in quarters)
    assert np.asarray(pkg.user_jvp(x, y, dx, 0.2)).item() == pytest.approx(want, rel=1e-12)
    xs = x.reshape(2, -1)
    np.testing.assert_allclose(pkg.vuser(xs, y), [pkg.user(row, y) for row in xs], rtol=1e-12)


@pytest.mark.parametrize("export", list(BIG_EXPORTS))
def test_a_large_tensor_helper_called_gives_torchs_values(big_built, export):
    """Oracle: the kernel source run by torch (torch.func for jvp, vmap and grad)."""
    import torch
    pkg, source, _ = big_built
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-1, 1, 6), 0.3
    tx, ty = torch.tensor(x), torch.tensor(y, dtype=torch.float64)
    if export == "user":
        got, want = pkg.user(x, y), source.user(tx, ty)
    elif export == "user_jvp":
        dx = rng.uniform(-1, 1, 6)
        got = pkg.user_jvp(x, y, dx, 0.2)
        want = torch.func.jvp(source.user, (tx, ty), (torch.tensor(dx), torch.tensor(0.2, dtype=torch.float64)))[1]
    elif export == "user_grad":
        got, want = pkg.user_grad(x, y), torch.func.grad(source.user, argnums=(0, 1))(tx, ty)
    else:
        xs = rng.uniform(-1, 1, (4, 6))
        got, want = pkg.vuser(xs, y), torch.func.vmap(source.user, in_dims=(0, None))(torch.tensor(xs), ty)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-11, atol=1e-12)


def test_examples_gmm_with_every_tensor_helper_a_call(tmp_path):
    """With the size rule off, examples/gmm's tensor helpers (cholesky_factor, log_wishart_prior) are functions of
    their own, with their jvp, forward and backward halves, and every export gives the reference's values: the
    numpy objective and torch's autograd gradient (examples/gmm/reference.py)."""
    import importlib.util

    from conftest import ROOT

    import ksbuild
    from ksbuild.cli import main as cli_main
    from ksbuild.prims import control
    gmm = ROOT / "examples" / "gmm"
    manifest = (gmm / "manifest.toml").read_text().replace('name = "gmm"', 'name = "gmmcalls"')
    (tmp_path / "manifest.toml").write_text(manifest.replace('"gmm.py:', f'"{gmm / "gmm.py"}:'))
    spec = importlib.util.spec_from_file_location("gmm_calls_reference", gmm / "reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(control, "BATCHED_CALL_EQNS_PER_ARRAY", 0)
        assert cli_main(["render", str(tmp_path / "manifest.toml"), "-o", str(tmp_path / "out")]) == 0
        pkg = ksbuild.build(tmp_path / "manifest.toml", quiet=True, optimize=DEBUG)  # (values, as the module's)
    cpp = (tmp_path / "out/src/gmmcalls.cpp").read_text()
    for name in ("cholesky_factor", "log_wishart_prior", "fwd_cholesky_factor", "bwd_log_wishart_prior"):
        assert re.search(rf"^static void {name}\(", cpp, re.M), name
    # a view is passed as it is, with its strides (qs = icf[:, :d]: rows of icf, row stride T), not packed first
    # (50 packed copies before: qs_packed, ls_packed, ...)
    assert re.search(r"^static void log_wishart_prior\(.*const double\* qs, int64_t qs_s0, const double\* ls, ", cpp,
                     re.M) and "detail::log_wishart_prior(K, d, T, icf, T, (icf + d), T, " in cpp
    assert "_packed" not in cpp
    data = ref.make_data(3, 4, 7)
    args = [data[k] for k in ("alphas", "means", "icf", "x", "gamma", "m")]
    grads = ref.gmm_grad_torch(data)[1:]
    for export in ("gmm", "gmm_loop", "gmm_tri", "gmm_tri_vec"):
        assert getattr(pkg, export)(*args) == pytest.approx(ref.gmm_objective_numpy(*args), rel=1e-12)
        for got, want in zip(getattr(pkg, export + "_grad")(*args), grads):
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
