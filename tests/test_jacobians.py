"""jacfwd, jacrev, jacobian, hessian (issue 32): whole Jacobians as manifest transformations and in the dev loop.

Oracles: torch.func.jacfwd / jacrev / hessian (and torch.vmap of them) on the same source, through the
reference interpreter and compiled; torch.autograd.functional.jacobian over the tensor kernel corpus.
The primal is computed once, not once per direction: checked on the lowered IR and in the generated C++.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import DEBUG
from source_kernels import build_source, ir_getter, source_module

from ksbuild.errors import KsbuildError
from ksbuild.ir.interp import eval_func
from ksbuild.ir.printer import print_func
from ksbuild.ir.types import Type
from ksbuild.ir.verify import verify
from ksbuild.prims.base import form_name
from ksbuild.transforms.jacobian import elements_key, hessian_func, jacfwd_func, jacobian_func, jacrev_func
from ksbuild.transforms.pipeline import lower
from ksbuild.transforms.vmap import vmap_func

SOURCE = '''\
import torch


def cube(x: float) -> float:
    return torch.sin(x) * x * x


def layer(x: "float[3]", W: "float[4, 3]") -> "float[4]":
    return torch.tanh(W @ x) * torch.sum(x * x)


def two_out(x: "float[2, 3]", y: float) -> tuple["float[3]", float]:
    return torch.sum(torch.exp(x) * y, 0), torch.sum(x * x) * y


def scan(x: "float[n]") -> "float[n]":
    return torch.cumsum(x, 0) * torch.sin(x)


def with_count(k: int, x: "float[3]") -> "float[3]":
    return x * x * k


def residuals(theta: "float[4]", A: "float[30, 4]") -> "float[30]":
    """Few parameters, many residuals: jacobian picks forward mode."""
    return torch.tanh(A @ theta) * torch.exp(torch.sum(theta))
'''
PY: dict = {}
exec(compile(SOURCE, "jac_kernels.py", "exec", dont_inherit=True), PY)
RNG = np.random.default_rng(32)
ARGS = {
    "cube": [0.7],
    "layer": [RNG.standard_normal(3), RNG.standard_normal((4, 3))],
    "two_out": [RNG.standard_normal((2, 3)), 1.3],
    "scan": [RNG.standard_normal(5)],
    "with_count": [3, RNG.standard_normal(3)],
    "residuals": [RNG.standard_normal(4) * 0.3, RNG.standard_normal((30, 4))],
}
TORCH = {"jacfwd": torch.func.jacfwd, "jacrev": torch.func.jacrev, "hessian": torch.func.hessian,
         "jacobian": torch.func.jacrev}
OURS = {"jacfwd": jacfwd_func, "jacrev": jacrev_func, "hessian": hessian_func, "jacobian": jacobian_func}
# (kernel, argnums or None for the default 0); every kind runs on each
POINTS = [("cube", None), ("layer", None), ("layer", (1,)), ("layer", (0, 1)), ("layer", (1, 0)),
          ("two_out", None), ("two_out", (0, 1)), ("scan", None), ("with_count", (1,)), ("residuals", None)]


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    return ir_getter(tmp_path_factory, SOURCE, "jac_kernels")


def torch_args(name: str) -> list:
    return [a if isinstance(a, int) else torch.tensor(a, dtype=torch.float64) for a in ARGS[name]]


def torch_blocks(kind: str, name: str, argnums, f=None) -> list[np.ndarray]:
    """torch.func's Jacobian (or Hessian) of kernel `name`, flattened: results outer, argnums, then argnums."""
    fn = f or PY[name]
    nums = argnums if argnums is not None else 0
    out = TORCH[kind](fn, argnums=nums)(*torch_args(name))
    return [b.numpy() for b in _flatten(out)]


def _flatten(x) -> list:
    return [x] if torch.is_tensor(x) else [b for item in x for b in _flatten(item)]


def assert_blocks(got, want: list[np.ndarray], what: str, rtol: float = 1e-10) -> None:
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        assert np.shape(g) == w.shape, what
        np.testing.assert_allclose(np.asarray(g), w, rtol=rtol, atol=1e-12, err_msg=what)


# ---- the transformations on the reference interpreter ------------------------------------------------------


@pytest.mark.parametrize("kind", list(OURS))
@pytest.mark.parametrize("name,argnums", POINTS, ids=lambda p: str(p))
def test_matches_torch_func(kind, name, argnums, ir):
    f = ir(name)
    jf = OURS[kind](f, argnums)
    verify(jf)
    want = torch_blocks(kind, name, argnums)
    assert_blocks(eval_func(jf, ARGS[name]), want, f"{kind} {name} {argnums}")
    assert_blocks(eval_func(lower(jf), ARGS[name]), want, f"{kind} {name} {argnums} lowered")


def test_vmap_of_jacobians(ir):
    """vmap(jacfwd(f)) and vmap(jacrev(f)) against torch.vmap of torch.func's."""
    f, W = ir("layer"), ARGS["layer"][1]
    xs = RNG.standard_normal((5, 3))
    for kind in ("jacfwd", "jacrev", "hessian"):
        vj, _ = vmap_func(OURS[kind](f, (0,)), [True, False], "b", [True])
        want = torch.vmap(TORCH[kind](PY["layer"]), in_dims=(0, None))(torch.tensor(xs), torch.tensor(W))
        assert_blocks(eval_func(vj, [xs, W]), [want.numpy()], f"vmap({kind})")


def test_jacobians_of_vmap(ir):
    """jacfwd(vmap(f)) and jacrev(vmap(f)): blocks [n, 4, n, 3], zero off the diagonal in n."""
    f, W = ir("layer"), ARGS["layer"][1]
    xs = RNG.standard_normal((3, 3))
    vf, _ = vmap_func(f, [True, False], "b", [True])
    want = torch.func.jacfwd(torch.vmap(PY["layer"], in_dims=(0, None)))(torch.tensor(xs), torch.tensor(W))
    for kind in ("jacfwd", "jacrev"):
        assert_blocks(eval_func(OURS[kind](vf), [xs, W]), [want.numpy()], f"{kind}(vmap)")


def test_block_names(ir):
    assert jacfwd_func(ir("layer"), (0, 1)).result_names == ("df_dx", "df_dW")
    assert jacrev_func(ir("two_out"), (1,)).result_names == ("df0_dy", "df1_dy")
    assert hessian_func(ir("layer"), (0, 1)).result_names == ("d2f_dx_dx", "d2f_dx_dW", "d2f_dW_dx", "d2f_dW_dW")


def test_jacobian_picks_the_mode_with_fewer_directions(ir):
    """Forward when the argnums have fewer elements than the float results, else reverse; symbolic dims count
    as more than any literal size."""
    f = ir("residuals")
    assert print_func(jacobian_func(f, (0,), "j")) == print_func(jacfwd_func(f, (0,), "j"))  # 4 < 30
    assert print_func(jacobian_func(f, (1,), "j")) == print_func(jacrev_func(f, (1,), "j"))  # 120 > 30
    assert print_func(jacobian_func(ir("cube"), None, "j")) == print_func(jacrev_func(ir("cube"), None, "j"))
    n, big = Type("f32", ("n",)), Type("f32", (300, 26))
    assert elements_key([big]) < elements_key([n]) < elements_key([Type("f32", ("n", 3))])
    assert elements_key([Type("f32", (3,)), Type("f32", (4,))]) == (0, 7)


def test_primal_is_computed_once(ir):
    """In jacfwd the primal's tanh and exp run on unbatched values only (the tangents' directions are a
    leading axis of 4 that no primal operation carries); in jacrev the forward pass runs once."""
    f = ir("residuals")
    for kind in ("jacfwd", "jacrev"):
        low = lower(OURS[kind](f, (0,)))
        primal = [e for e in _all_eqns(low) if form_name(e.prim, e.params) in ("tanh", "exp")]
        assert sorted(e.outs[0].type.shape for e in primal) == [(), (30,)], kind


def _all_eqns(f):
    from ksbuild.ir.core import sub_funcs
    for e in f.eqns:
        yield e
        for g in sub_funcs(e):
            yield from _all_eqns(g)


def test_errors(ir):
    with pytest.raises(KsbuildError, match="argnums 2 is out of range"):
        jacfwd_func(ir("layer"), (2,))
    with pytest.raises(KsbuildError, match="argument 'k' of 'with_count' is not a float"):
        jacrev_func(ir("with_count"))


# ---- the manifest: grammar, errors and compiled values -------------------------------------------------------

COMPILED = {  # export -> (kind, kernel, argnums as torch.func takes them, or None)
    "cube_jf": ("jacfwd", "cube", None), "cube_jr": ("jacrev", "cube", None), "cube_h": ("hessian", "cube", None),
    "layer_jf": ("jacfwd", "layer", (0, 1)), "layer_jr": ("jacrev", "layer", (1, 0)),
    "layer_j": ("jacobian", "layer", 1), "layer_h": ("hessian", "layer", (0, 1)),
    "two_jf": ("jacfwd", "two_out", (0, 1)), "two_jr": ("jacrev", "two_out", (0, 1)),
    "two_h": ("hessian", "two_out", None), "scan_j": ("jacobian", "scan", None),
    "count_jr": ("jacrev", "with_count", 1), "res_j": ("jacobian", "residuals", None),
}
EXPORTS = {e: f"{kind}({name}" + (f", argnums={nums}" if nums is not None else "") + ")"
           for e, (kind, name, nums) in COMPILED.items()}
EXPORTS |= {"vlayer_jr": "vmap(jacrev(layer), in_axes=(0, None))",
            "jf_vlayer": "jacfwd(vmap(layer, in_axes=(0, None)))"}


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return build_source(tmp_path_factory, SOURCE, "jac_kernels", EXPORTS, DEBUG)  # (values against torch.func)


def test_compiled_matches_torch_func(pkg):
    for export, (kind, name, nums) in COMPILED.items():
        assert_blocks(getattr(pkg, export)(*ARGS[name]), torch_blocks(kind, name, nums), export, rtol=1e-9)


def test_compiled_nested_with_vmap(pkg):
    xs, W = RNG.standard_normal((4, 3)), ARGS["layer"][1]
    tx, tW = torch.tensor(xs), torch.tensor(W)
    want = torch.vmap(torch.func.jacrev(PY["layer"]), in_dims=(0, None))(tx, tW)
    assert_blocks(pkg.vlayer_jr(xs, W), [want.numpy()], "vmap(jacrev)", rtol=1e-9)
    want = torch.func.jacfwd(torch.vmap(PY["layer"], in_dims=(0, None)))(tx, tW)
    assert_blocks(pkg.jf_vlayer(xs, W), [want.numpy()], "jacfwd(vmap)", rtol=1e-9)


def test_generated_cpp_computes_the_primal_once(pkg):
    """The compiled jacobian(residuals) (forward mode, 4 directions) calls tanh in one loop over the 30
    residuals, not in a loop over directions and residuals."""
    src = (pkg.root / "share" / "jac_kernels" / "src" / "jac_kernels.cpp").read_text()
    body = src.split("jac_kernels_res_j(", 1)[1].split("\n}\n", 1)[0].splitlines()
    calls = [i for i, s in enumerate(body) if "ks::tanh(" in s]
    assert len(calls) == 1
    depth = (len(body[calls[0]]) - len(body[calls[0]].lstrip())) // 4 - 1  # loops around it (the body is at 4)
    loop = next(s for s in reversed(body[:calls[0]]) if s.lstrip().startswith("for ("))
    assert depth == 1 and "< 30;" in loop


def test_signature_in_check(tmp_path):
    """ksbuild check shows the block types: out.shape + x.shape, one per result and argnum."""
    from ksbuild.exports import build_exports
    from ksbuild.manifest import load_manifest

    (tmp_path / "k.py").write_text(SOURCE)
    lines = ["[package]", 'name = "jk"', "[kernels.two_out]", 'python = "k.py:two_out"', "[exports]",
             'a = "jacfwd(two_out, argnums=(0, 1))"', 'b = "hessian(two_out, argnums=1)"']
    (tmp_path / "manifest.toml").write_text("\n".join(lines) + "\n")
    got = {e.name: [str(t) for t in e.func.out_types] for e in build_exports(load_manifest(tmp_path / "manifest.toml"))}
    assert got == {"a": ["f32[3, 2, 3]", "f32[3]", "f32[2, 3]", "f32"], "b": ["f32[3]", "f32"]}


@pytest.mark.parametrize("expr,message", [
    ("jacfwd(with_count)", "jacfwd(with_count) differentiates argument 0 by default"),
    ("jacrev(layer, argnums=(0, 0))", "an argument is listed twice"),
    ("hessian(layer, in_axes=(0, None))", "keyword argument 'in_axes' to hessian; hessian takes only argnums"),
    ("jacobian(layer, argnums=5)", "argnums 5 is out of range"),
    ("jacfwd(layer, layer)", "jacfwd takes exactly one function"),
])
def test_manifest_errors(tmp_path, expr, message):
    from ksbuild.exports import build_exports
    from ksbuild.manifest import load_manifest

    (tmp_path / "k.py").write_text(SOURCE)
    lines = ["[package]", 'name = "jk"', "[kernels.layer]", 'python = "k.py:layer"', "[kernels.with_count]",
             'python = "k.py:with_count"', "[exports]", f'e = "{expr}"']
    (tmp_path / "manifest.toml").write_text("\n".join(lines) + "\n")
    with pytest.raises(KsbuildError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        build_exports(load_manifest(tmp_path / "manifest.toml"))
    assert info.value.loc is not None and info.value.loc.line == 8


# ---- the tensor kernel corpus: every float argument, both modes, against torch.autograd ---------------------

try:
    import test_tensor_corpus as T
except ImportError:
    T = None


@pytest.mark.skipif(T is None, reason="the kernel corpus's table needs torch")
@pytest.mark.parametrize("case", T.CASES if T is not None else [], ids=str)
def test_corpus(case):
    from ksbuild.frontends.python.source import compile_python_kernel
    f = compile_python_kernel(T.KERNELS_FILE, case.kernel, "f64")
    args = case.args()
    nums = tuple(i for i, t in enumerate(case.types) if t.is_float)
    want = _autograd_blocks(case, args, nums)
    for kind in ("jacfwd", "jacrev"):
        got = eval_func(lower(OURS[kind](f, nums)), list(args))
        assert_blocks(got, want, f"{kind} {case.id}", rtol=1e-8)


def _autograd_blocks(case, args, nums) -> list[np.ndarray]:
    """torch.autograd.functional.jacobian of the float results in the float arguments (the others fixed)."""
    targs, leaves = T.to_torch(case, args)

    def fn(*xs):
        full = list(targs)
        for i, x in zip(nums, xs):
            full[i] = x
        return tuple(o for o in T.as_list(getattr(T.K, case.kernel)(*full)) if o.is_floating_point())

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        jac = torch.autograd.functional.jacobian(fn, tuple(leaves))
    finally:
        torch.set_default_dtype(old)
    return [b.numpy() for row in jac for b in row]


# ---- the dev loop ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    """The kernels as an imported module (the dev loop compiles module-level functions from their file)."""
    return source_module(tmp_path_factory, SOURCE, "jac_dev_kernels")


def test_dev_loop_matches_torch_func(dev):
    import ksbuild
    x, W = (torch.tensor(a) for a in ARGS["layer"])
    got = ksbuild.jacfwd(dev.layer, argnums=(0, 1))(x, W)
    assert isinstance(got, tuple) and [tuple(g.shape) for g in got] == [(4, 3), (4, 4, 3)]
    assert_blocks([g.numpy() for g in got], torch_blocks("jacfwd", "layer", (0, 1)), "dev jacfwd")
    xs = torch.tensor(RNG.standard_normal((5, 3)))
    got = ksbuild.vmap(ksbuild.jacrev(dev.layer), in_axes=(0, None))(xs, W)
    want = torch.vmap(torch.func.jacrev(PY["layer"]), in_dims=(0, None))(xs, W)
    assert_blocks([got.numpy()], [want.numpy()], "dev vmap(jacrev)")
    assert repr(ksbuild.hessian(dev.cube)) == "<ksbuild kernel hessian(cube, argnums=(0,))>"
    h = ksbuild.hessian(dev.cube)(torch.tensor(0.7, dtype=torch.float64))
    assert_blocks([h.numpy()], torch_blocks("hessian", "cube", None), "dev hessian")


def test_dev_loop_autograd_through_a_jacobian(dev):
    """A loss on the Jacobian trains: its gradient goes through the generated vjp of jacobian(residuals)."""
    import ksbuild
    theta, A = (torch.tensor(a) for a in ARGS["residuals"])
    leaf = theta.clone().requires_grad_()
    (got,) = torch.autograd.grad(ksbuild.jacobian(dev.residuals)(leaf, A).square().sum(), leaf)
    ref = theta.clone().requires_grad_()
    (want,) = torch.autograd.grad(torch.func.jacfwd(PY["residuals"])(ref, A).square().sum(), ref)
    assert_blocks([got.numpy()], [want.numpy()], "grad of a loss on the Jacobian", rtol=1e-9)


@pytest.mark.parametrize("argnums", [(), (0, 0), -1, 1.0])
def test_dev_loop_bad_argnums(dev, argnums):
    import ksbuild
    with pytest.raises(KsbuildError, match="argnums must be an integer >= 0 or a tuple of distinct ones"):
        ksbuild.jacrev(dev.layer, argnums=argnums)
