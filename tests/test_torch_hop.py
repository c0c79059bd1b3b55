"""torch's higher-order scan and counted while_loop through the torch.export frontend
(frontends/torch_export/hop.py): one IR loop each.

Models in tests/hop_models.py. Oracles: the torch modules (values, eager), torch.autograd and torch.func.vjp
(vjps), the compiled C++ of a package built from the models."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from conftest import DEBUG, ROOT

torch = pytest.importorskip("torch")
import hop_models as models  # noqa: E402

from ksbuild.errors import KsbuildError  # noqa: E402
from ksbuild.ir.interp import eval_func  # noqa: E402
from ksbuild.ir.verify import verify  # noqa: E402
from ksbuild.transforms.pipeline import lower  # noqa: E402
from ksbuild.transforms.vjp import vjp_func  # noqa: E402

MODELS_FILE = ROOT / "tests" / "hop_models.py"
TOL = dict(rtol=1e-10, atol=1e-12)
NAMES = ["recurrence", "nested", "reversed", "counted"]


@functools.lru_cache(maxsize=None)
def imported(name: str):
    """The frontend's function of make_<name> (what compile_torch_kernel gives, before any transformation)."""
    from ksbuild.frontends.torch_export import compile_torch_kernel
    f = compile_torch_kernel(str(MODELS_FILE), Path("."), f"make_{name}", name)
    verify(f)
    return f


def _flat(v) -> list:
    return [t.detach().numpy() for t in torch.utils._pytree.tree_leaves(v)]


def assert_close(got, want) -> None:
    got = got if isinstance(got, (tuple, list)) else [got]  # (a package's export of one result returns it)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), **TOL)


def _loops(f) -> list:
    return [e for e in f.eqns if e.prim.name == "loop"]


@pytest.mark.parametrize("name", NAMES)
def test_scan_is_one_loop_with_torchs_values(name):
    module, args = getattr(models, f"make_{name}")()
    f = imported(name)
    assert len(_loops(f)) == 1 and len(f.eqns) < 15  # (the steps are not unrolled)
    with torch.no_grad():
        assert_close(eval_func(f, [a.numpy() for a in args]), _flat(module(*args)))


def test_nested_scan_is_a_loop_in_a_loop():
    (outer,) = _loops(imported("nested"))
    assert [e.prim.name for e in outer.params["body"].eqns].count("loop") == 1


def _oracle(name: str, module, autograd: bool = True):
    """What torch differentiates for model `name`: the module (torch.autograd), or its Python-loop twin
    (torch.func; torch.autograd does not differentiate Nested's scan in a scan either)."""
    if name == "nested":
        return models.nested_loops
    return module if autograd and name != "counted" else module.loops


def _cotangents(f, xs, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(np.shape(o)) for o in eval_func(f, xs)]


@pytest.mark.parametrize("name", NAMES)
def test_vjp_matches_autograd(name):
    module, args = getattr(models, f"make_{name}")()
    xs = [a.numpy() for a in args]
    cts = _cotangents(imported(name), xs)
    ps = [a.clone().requires_grad_(True) for a in args]
    outs = torch.utils._pytree.tree_leaves(_oracle(name, module)(*ps))
    want = torch.autograd.grad(outs, ps, [torch.as_tensor(c) for c in cts])
    assert_close(eval_func(lower(vjp_func(imported(name))), xs + cts), _flat(want))


def test_length_is_the_dim_of_xs():
    """With Dim("steps") on xs the loop runs that many steps (here 9, exported at 30)."""
    module, args = models.make_recurrence()
    f = imported("recurrence_dynamic")
    assert _loops(f)[0].params["length"] == "steps"
    args = (args[0], args[1][:9], args[2])
    with torch.no_grad():
        assert_close(eval_func(f, [a.numpy() for a in args]), _flat(module(*args)))


def test_counted_while_loop_runs_n_minus_start_steps():
    (loop,) = _loops(imported("counted"))
    assert loop.params["length"] == 7 and loop.params["n_consts"] == 1  # (i from 3 while i < 10; a)


def test_uncounted_while_loop_is_a_located_error():
    with pytest.raises(KsbuildError, match="while_loop: only a counted loop is read") as e:
        imported("converging")
    lines = MODELS_FILE.read_text().splitlines()
    assert e.value.loc.file == str(MODELS_FILE)
    assert "return while_loop(lambda y" in lines[e.value.loc.line - 1]
    assert "scan" in e.value.hint


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    import ksbuild
    folder = tmp_path_factory.mktemp("hop")
    path = folder / "manifest.toml"
    path.write_text("\n".join([
        '[package]', 'name = "scans"', '',
        '[kernels.rec]', f'torch = "{MODELS_FILE}:make_recurrence"', '',
        '[kernels.nested]', f'torch = "{MODELS_FILE}:make_nested"', '',
        '[kernels.counted]', f'torch = "{MODELS_FILE}:make_counted"', '',
        '[exports]', 'rec = "rec"', 'rec_vjp = "vjp(rec)"', 'nested = "nested"', 'nested_vjp = "vjp(nested)"',
        'counted = "counted"', 'counted_vjp = "vjp(counted)"', '']))
    return ksbuild.build(path, optimize=DEBUG)


@pytest.mark.parametrize("name, make", [("rec", "make_recurrence"), ("nested", "make_nested"),
                                        ("counted", "make_counted")])
def test_compiled_matches_torch_func(pkg, name, make):
    """The C++ of the loop and of its vjp against torch eager and torch.func.vjp."""
    module, args = getattr(models, make)()
    xs = [a.numpy() for a in args]
    with torch.no_grad():
        assert_close(getattr(pkg, name)(*xs), _flat(module(*args)))
    fn = _oracle(name, module, autograd=False)
    outs, pullback = torch.func.vjp(lambda *a: tuple(torch.utils._pytree.tree_leaves(fn(*a))), *args)
    cts = [torch.as_tensor(c) for c in _cotangents(imported(make[5:]), xs, seed=1)]
    assert_close(getattr(pkg, f"{name}_vjp")(*xs, *[c.numpy() for c in cts]), _flat(pullback(tuple(cts))))


def test_unsupported_op_in_a_body_is_located():
    """torch.export (non-strict) records the scan call as the body's nodes' user line, not the body's own."""
    with pytest.raises(KsbuildError, match="aten.cummax.default is not supported") as e:
        imported("unsupported")
    lines = MODELS_FILE.read_text().splitlines()
    assert e.value.loc.file == str(MODELS_FILE) and "cummax" in e.value.loc.node
    assert "return scan(step" in lines[e.value.loc.line - 1]
