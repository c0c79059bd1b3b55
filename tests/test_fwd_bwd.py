"""fwd(f) / bwd(f): vjp split at the residuals, so that a training step does not run the forward twice.

Oracles: vjp(f) of the same kernel and torch.autograd (through tests/test_tensor_corpus.py's table),
on the reference interpreter; the compiled exports are checked in tests/test_torch_dev_loop.py."""
from __future__ import annotations

import numpy as np
import pytest

from ksbuild.errors import KsbuildError
from ksbuild.ir.interp import bind_dims, eval_func
from ksbuild.manifest import TExpr, load_manifest
from ksbuild.transforms.pipeline import lower
from ksbuild.transforms.vjp import bwd_func, fwd_func, vjp_func
from ksbuild.transforms.vmap import fresh_dim, vmap_func

try:
    import test_tensor_corpus as T  # the kernel corpus is plain PyTorch code: its table imports torch
except ImportError:
    T = None
needs_corpus = pytest.mark.skipif(T is None, reason="torch is not installed (the kernel corpus's table needs it)")
CASES = T.CASES if T is not None else []


@pytest.fixture(scope="module")
def ir():
    from ksbuild.frontends.python.source import compile_python_kernel
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = compile_python_kernel(T.KERNELS_FILE, name, "f64")
        return cache[name]
    return get


def fwd_then_bwd(f, args, cts):
    """(results of fwd(f), cotangents of bwd(f) on its residuals), through the interpreter."""
    outs = eval_func(lower(fwd_func(f)), list(args))
    n = len(f.results)
    dims = bind_dims(f.in_types, [np.asarray(a) for a in args])
    return outs[:n], eval_func(lower(bwd_func(f)), list(args) + list(outs[n:]) + list(cts), dims)


@needs_corpus
@pytest.mark.parametrize("case", CASES, ids=str)
def test_fwd_bwd_equals_f_and_vjp(case, ir):
    f, args = ir(case.kernel), case.args()
    cts = T.cotangents(case, args)
    results, grads = fwd_then_bwd(f, args, cts)
    T.assert_close(tuple(results), T.torch_value(case, args), 1e-8, f"fwd {case.id}")
    T.assert_close(tuple(grads), T.torch_vjp(case, args, cts), 1e-8, f"bwd {case.id}", atol=1e-10)
    want = [np.asarray(g) for g in eval_func(vjp_func(f), [*args, *cts])]
    T.assert_close(tuple(grads), want, 1e-12, f"vjp {case.id}")


@needs_corpus
@pytest.mark.parametrize("name", ["huber_regression", "point_segment_distance", "ray_sphere"])
def test_fwd_bwd_under_vmap(name, ir):
    """A per-lane branch under vmap becomes a select; its residuals are masks."""
    case = next(c for c in T.CASES if c.kernel == name and "mixed" in c.id or c.kernel == name == "huber_regression")
    f = ir(name)
    vf, _ = vmap_func(f, case.mask, fresh_dim(f), [True] * len(f.results), name=f"vmap_{name}")
    args = T.stacked(case, T.lanes(case))
    outs = eval_func(vf, args)
    rng = np.random.default_rng(7)
    cts = [rng.standard_normal(np.shape(o)) for o, t in zip(outs, vf.out_types) if t.is_float]
    results, grads = fwd_then_bwd(vf, args, cts)
    for r, o in zip(results, outs):
        np.testing.assert_allclose(r, o, rtol=1e-14)
    for g, w in zip(grads, eval_func(vjp_func(vf), [*args, *cts])):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def write(tmp_path, exports: str):
    (tmp_path / "k.py").write_text("def f(x: float, y: float) -> float:\n    return x * y\n\n"
                                   "def neg(x: float) -> bool:\n    return x < 0.0\n")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "p"\n[kernels.f]\npython = "k.py:f"\n'
                                            '[kernels.neg]\npython = "k.py:neg"\n[exports]\n' + exports)
    return tmp_path / "manifest.toml"


def test_manifest_accepts_fwd_and_bwd(tmp_path):
    m = load_manifest(write(tmp_path, 'a = "fwd(vmap(f))"\nb = "bwd(f, argnums=1)"\n'))
    assert m.exports["a"].expr == TExpr("fwd", arg=TExpr("vmap", arg=TExpr("kernel", "f")))
    assert m.exports["b"].expr == TExpr("bwd", arg=TExpr("kernel", "f"), argnums=(1,))


@needs_corpus
def test_bwd_with_argnums_matches_vjp_with_argnums(ir):
    f = ir("gaussian_loglik")
    case = next(c for c in T.CASES if c.kernel == "gaussian_loglik")
    args = case.args()
    fw, bw = lower(fwd_func(f, argnums=(0,))), lower(bwd_func(f, argnums=(0,)))
    outs = eval_func(fw, list(args))
    dims = bind_dims(f.in_types, [np.asarray(a) for a in args])
    got = eval_func(bw, list(args) + list(outs[1:]) + [1.5], dims)
    want = eval_func(vjp_func(f, argnums=(0,)), [*args, 1.5])
    assert len(got) == 1
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)


def test_fwd_of_a_function_without_float_result_is_an_error(tmp_path):
    from ksbuild.exports import build_exports
    with pytest.raises(KsbuildError, match="no float result") as e:
        build_exports(load_manifest(write(tmp_path, 'a = "fwd(neg)"\n')))
    assert "manifest.toml" in str(e.value)
