"""vmap keeps calls: vmap of a kernel that calls helpers calls each helper batched (`vmap_softplus`, a tensor
function of its own in namespace detail, with its own memory plan and workspace), built once per batching of its
arguments, instead of inlining it; jvp and vjp of such a call call the transformed batched callee
(`jvp_vmap_softplus`, `fwd_vmap_softplus`, `bwd_vmap_softplus`), at every nesting.

Oracles: torch.autograd on the same Python source run lane by lane in a Python loop (the unbatched function on
0-d float64 tensors), and the reference interpreter on the export built with every call inlined first."""
from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import DEBUG, build_kernel_file

from ksbuild.exports import apply_transform, compile_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.manifest import load_manifest
from ksbuild.transforms.inline_calls import inline_calls

torch = pytest.importorskip("torch")

KERNELS = '''import torch


def softplus(x: float) -> float:
    if x > 2.0:
        return x + torch.log1p(torch.exp(-x))
    return torch.log1p(torch.exp(x))


def pair(a: float, b: float):
    return a * b, a + torch.sin(b)


def powsum(x: float, y: float) -> float:
    s = 0.0
    t = 1.0
    for i in range(3):
        t = t * x + y
        s = s + softplus(t) / (i + 1.0)
    return s


def two(x: float, y: float) -> float:
    p, q = pair(x, y)
    return softplus(x) * softplus(y) + softplus(x * y) + powsum(p, q)


def pw(x: float, y: float) -> float:
    return powsum(x, y) * x


def rows(x: "float[m]", y: float) -> float:
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            s = s + softplus(x[i] * y)
        else:
            s = s - powsum(y, x[i]) * x[i]
    return s
'''

EXPORTS = {
    "vtwo": "vmap(two)", "vtwo_half": "vmap(two, in_axes=(0, None))", "vvtwo": "vmap(vmap(two))",
    "vtwo_jvp": "jvp(vmap(two))", "vtwo_vjp": "vjp(vmap(two))", "vgrad": "vmap(grad(two))",
    "vjvp": "vmap(jvp(two))", "vvgrad": "vmap(vmap(grad(two)))", "vhvp": "vmap(jvp(grad(two)))",
    "vrows": "vmap(rows, in_axes=(0, None))", "vrows_vjp": "vjp(vmap(rows, in_axes=(0, None)))",
    "rows_jacfwd": "jacfwd(rows)", "rows_jacrev": "jacrev(rows)", "rows_hess": "hessian(rows)",
    "vrows_grad": "vmap(grad(rows))", "vvtwo_vjp": "vjp(vmap(vmap(two)))", "vtwo_jvp_v": "vmap(jvp(vmap(two)))",
    "rows3_jacfwd": "jacfwd(rows3)", "rows3_hess": "hessian(rows3)",  # (a batch of 3 directions: static sizes)
    # (scalar exports whose helper's forward half has tensors, powsum's residuals per iteration: a workspace on
    # the caller's stack)
    "pw_grad": "grad(pw)", "pw_hvp": "jvp(grad(pw))",
}
MANIFEST = "\n".join(['[package]', 'name = "vcalls"', '[build]', 'dtype = "float64"']
                     + [f'[kernels.{k}]\npython = "k.py:{k}"' for k in ("two", "rows", "pw")]
                     + ['[kernels.rows3]\npython = "k.py:rows"\nsignature = "(x: f64[3], y: f64) -> f64"']
                     + ['[exports]'] + [f'{k} = "{v}"' for k, v in EXPORTS.items()]) + "\n"


@pytest.fixture(scope="module", autouse=True)
def small_callees_stay_calls():
    """These helpers are small: the batched-call machinery runs on them only with the size rule off."""
    from ksbuild.prims import control
    with pytest.MonkeyPatch.context() as m:
        m.setattr(control, "BATCHED_CALL_EQNS_PER_ARRAY", 0)
        yield


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("vcalls")
    pkg, source = build_kernel_file(root, KERNELS, MANIFEST, "vcalls_k", DEBUG)
    return pkg, source, root


def _t(a):
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def _grads(f, args, create=False):
    """f's value and its gradient in each argument, one lane (0-d or 1-d torch tensors)."""
    ts = [_t(a) for a in args]
    y = f(*ts)
    return y, torch.autograd.grad(y, ts, create_graph=create)


def _hvp(f, args, dirs):
    """(H v) per argument of f at args, v = dirs."""
    ts = [_t(a) for a in args]
    gs = torch.autograd.grad(f(*ts), ts, create_graph=True)
    dot = sum((g * torch.tensor(d, dtype=torch.float64)).sum() for g, d in zip(gs, dirs))
    return [h.detach().numpy() for h in torch.autograd.grad(dot, ts)]


def _lanes(fn, *batched):
    """fn over the lanes of its (leading-axis) arguments, results stacked per position."""
    outs = [fn(*lane) for lane in zip(*batched)]
    outs = [o if isinstance(o, (tuple, list)) else (o,) for o in outs]
    return tuple(np.stack([np.asarray(o[k], dtype=float) for o in outs]) for k in range(len(outs[0])))


def _reference(src, export, args):
    """The export's results from torch on the Python source, one lane at a time."""
    two, rows, pw = src.two, src.rows, src.pw
    value = (lambda f: lambda *a: f(*[_t(v) for v in a]).item())
    grad = (lambda f: lambda *a: [g.item() for g in _grads(f, a)[1]])
    if export in ("vtwo", "vvtwo"):
        f = (lambda x, y: _lanes(value(two), x, y)[0]) if export == "vtwo" else \
            (lambda x, y: np.stack([_lanes(value(two), xr, yr)[0] for xr, yr in zip(x, y)]))
        return (f(*args),)
    if export == "vtwo_half":
        x, y = args
        return _lanes(lambda xi: value(two)(xi, y), x)
    if export in ("vtwo_jvp", "vjvp"):
        x, y, dx, dy = args
        return _lanes(lambda *a: sum(g * d for g, d in zip(grad(two)(*a[:2]), a[2:])), x, y, dx, dy)
    if export == "vtwo_vjp":
        x, y, ct = args
        return _lanes(lambda xi, yi, c: [c * g for g in grad(two)(xi, yi)], x, y, ct)
    if export == "vvtwo_vjp":  # (each row: vtwo_vjp's)
        per_row = [_reference(src, "vtwo_vjp", row) for row in zip(*args)]
        return tuple(np.stack([r[k] for r in per_row]) for k in range(2))
    if export == "vtwo_jvp_v":
        return (np.stack([_reference(src, "vtwo_jvp", row)[0] for row in zip(*args)]),)
    if export == "vgrad":
        return _lanes(grad(two), *args)
    if export == "vvgrad":
        per_row = [_lanes(grad(two), xr, yr) for xr, yr in zip(*args)]
        return tuple(np.stack([r[k] for r in per_row]) for k in range(2))
    if export == "vhvp":
        x, y, dx, dy = args
        return _lanes(lambda *a: [h.item() for h in _hvp(two, a[:2], a[2:])], x, y, dx, dy)
    if export == "pw_grad":
        return tuple(grad(pw)(*args))
    if export == "pw_hvp":
        return tuple(h.item() for h in _hvp(pw, args[:2], args[2:]))
    if export == "vrows":
        x, y = args
        return _lanes(lambda xr: value(rows)(xr, y), x)
    if export == "vrows_vjp":
        x, y, ct = args
        per = [(_grads(rows, (xr, y))[1], c) for xr, c in zip(x, ct)]
        return (np.stack([c * g[0].numpy() for g, c in per]), sum(c * g[1].item() for g, c in per))
    if export in ("rows_jacfwd", "rows_jacrev", "rows3_jacfwd"):
        return (_grads(rows, args)[1][0].numpy(),)
    if export in ("rows_hess", "rows3_hess"):
        x, y = args
        return (torch.autograd.functional.hessian(lambda v: rows(v, _t(y)), _t(x)).numpy(),)
    if export == "vrows_grad":
        return _lanes(lambda xr, yi: [g.detach().numpy() for g in _grads(rows, (xr, yi))[1]], *args)
    raise AssertionError(export)


def _args(export, rng):
    n, m = 5, 4

    def u(*shape):
        return rng.uniform(-1.5, 3.0, shape)
    if export in ("vtwo", "vgrad"):
        return [u(n), u(n)]
    if export == "vtwo_half":
        return [u(n), 0.4]
    if export in ("vvtwo", "vvgrad"):
        return [u(3, n), u(3, n)]
    if export == "vvtwo_vjp":
        return [u(3, n), u(3, n), u(3, n)]
    if export == "vtwo_jvp_v":
        return [u(3, n), u(3, n), u(3, n), u(3, n)]
    if export in ("vtwo_jvp", "vjvp", "vhvp"):
        return [u(n), u(n), u(n), u(n)]
    if export == "vtwo_vjp":
        return [u(n), u(n), u(n)]
    if export == "vrows":
        return [u(n, m), 0.7]
    if export == "vrows_vjp":
        return [u(n, m), 0.7, u(n)]
    if export == "vrows_grad":
        return [u(n, m), u(n)]
    if export.startswith("pw_"):
        return [float(v) for v in u(2 if export == "pw_grad" else 4)]
    if export.startswith("rows3"):
        return [u(3), 0.7]
    return [u(m), 0.7]  # rows_jacfwd, rows_jacrev, rows_hess


@pytest.mark.parametrize("export", list(EXPORTS))
def test_batched_helper_calls_equal_torch_lane_by_lane(built, export):
    pkg, src, _ = built
    args = _args(export, np.random.default_rng(len(export)))
    got = getattr(pkg, export)(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = _reference(src, export, args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("export", ["vvgrad", "vrows_vjp", "rows_hess", "vhvp"])
def test_kept_batched_calls_equal_the_interpreter_with_everything_inlined(built, export):
    """The transformed IR keeps its calls (marked kept), verifies, and gives what inlining every call first gives."""
    from ksbuild.ir.printer import print_func
    from ksbuild.ir.verify import verify
    _, _, root = built
    m = load_manifest(root / "manifest.toml")
    spec = m.exports[export]
    kept = apply_transform(spec.expr, {n: compile_kernel(m, k) for n, k in m.kernels.items()}, spec.loc)
    verify(kept)
    assert re.search(r"fn = func \w*vmap_\w+\(", print_func(kept)) and "kept=True" in print_func(kept)
    flat = apply_transform(spec.expr, {n: inline_calls(compile_kernel(m, k)) for n, k in m.kernels.items()},
                           spec.loc)
    args = _args(export, np.random.default_rng(3))
    for g, w in zip(eval_func(kept, list(args)), eval_func(flat, list(args))):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)


def _body(cpp: str, export: str) -> str:
    body = cpp[cpp.index(f"int vcalls_{export}("):]
    return body[:body.index("\n}\n")]


def test_each_batched_helper_is_one_function_called_from_every_use(built, tmp_path):
    from ksbuild.cli import main as cli_main
    _, _, root = built
    assert cli_main(["render", str(root / "manifest.toml"), "-o", str(tmp_path / "out")]) == 0
    cpp = (tmp_path / "out/src/vcalls.cpp").read_text()
    assert "vmap_softplus" not in (tmp_path / "out/include/vcalls.h").read_text()
    for name in ("vmap_softplus", "vmap_pair", "vmap_powsum"):
        assert len(re.findall(rf"^static void {name}\(", cpp, re.M)) == 1, name
    vtwo = _body(cpp, "vtwo")
    # softplus(x), softplus(y), softplus(x * y) batched alike: one callee, called three times; powsum's own call
    # of softplus is that callee too, and nothing of softplus is inlined into the export
    assert vtwo.count("detail::vmap_softplus(") == 3 and "log1p" not in vtwo
    assert vtwo.count("detail::vmap_pair(") == 1 and vtwo.count("detail::vmap_powsum(") == 1
    powsum = cpp[cpp.index("static void vmap_powsum("):]
    assert "detail::vmap_softplus(" in powsum[:powsum.index("\n}\n")]
    # in_axes=(0, None): softplus(y) of the unbatched y stays the scalar helper's call
    half = _body(cpp, "vtwo_half")
    assert half.count("detail::softplus(") == 1 and half.count("detail::vmap_softplus(") == 2
    grad = _body(cpp, "vtwo_vjp")
    assert "detail::fwd_vmap_softplus" in grad and "detail::bwd_vmap_softplus" in grad and "log1p" not in grad
