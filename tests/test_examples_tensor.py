"""The tensor examples against PyTorch: sqrl (values, vjp, vmap), the torch.where relu3 (one
loop, zero workspace), and the ADBench GMM objective and gradient (ADBench's error metric)."""
from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest
from conftest import ROOT

import ksbuild

torch = pytest.importorskip("torch")


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def sqrl_pkg():
    return ksbuild.build(ROOT / "examples/sqrl/manifest.toml")


@pytest.fixture(scope="module")
def sqrl_src():
    return load(ROOT / "examples/sqrl/sqrl.py")


def rows():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 9)).astype(np.float32)
    x[0] = -np.abs(x[0])  # sum < 0: the first branch
    x[1] = np.abs(x[1])   # sum >= 0: the second
    return x


def test_sqrl_values_and_vjp_match_torch(sqrl_pkg, sqrl_src):
    for x in rows():
        t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        y = sqrl_src.sqrl(t)
        (g,) = torch.autograd.grad(y, t)
        assert sqrl_pkg.sqrl(x) == pytest.approx(y.item(), rel=1e-5, abs=1e-6)
        np.testing.assert_allclose(sqrl_pkg.sqrl_vjp(x, 1.0), g.numpy(), rtol=1e-4, atol=1e-6)


def test_vsqrl_and_its_vjp_match_a_loop_over_rows(sqrl_pkg, sqrl_src):
    x = rows()
    want = [sqrl_src.sqrl(torch.tensor(r, dtype=torch.float64)).item() for r in x]
    np.testing.assert_allclose(sqrl_pkg.vsqrl(x), want, rtol=1e-5, atol=1e-6)
    ct = np.linspace(-1, 1, len(x)).astype(np.float32)
    got = sqrl_pkg.vsqrl_vjp(x, ct)
    for r, c, g in zip(x, ct, got):
        t = torch.tensor(r, dtype=torch.float64, requires_grad=True)
        (w,) = torch.autograd.grad(sqrl_src.sqrl(t), t)
        np.testing.assert_allclose(g, c * w.numpy(), rtol=1e-4, atol=1e-6)


def test_vsqrl_if_is_branch_free():
    """The per-row if of vmap(sqrl) is a select: the generated function has no `if (`."""
    src = (ksbuild.build(ROOT / "examples/sqrl/manifest.toml").root / "share/sqrl/src/sqrl.cpp").read_text()
    body = src[src.index("int sqrl_vsqrl("):]
    body = body[:body.index("\n}\n")]
    branches = [ln for ln in body.splitlines() if "if (" in ln and "return ks::status" not in ln]
    assert branches == []


def test_relu3_tensor_is_one_loop_with_zero_workspace(sqrl_pkg, sqrl_src):
    """The seeds' point: torch.where relu3 makes ten temporaries in PyTorch; here one loop, 0 bytes."""
    x = np.linspace(-2, 3, 101).astype(np.float32)
    want = sqrl_src.relu3_tensor(torch.tensor(x)).numpy()
    np.testing.assert_allclose(sqrl_pkg.relu3_tensor(x), want, rtol=1e-6, atol=1e-7)
    desc = json.loads((sqrl_pkg.root / "share/sqrl/sqrl.json").read_text())["exports"]
    assert desc["relu3_tensor"]["workspace"] is False
    assert desc["relu3_tensor_vjp"]["workspace"] is False
    src = (sqrl_pkg.root / "share/sqrl/src/sqrl.cpp").read_text()
    body = src[src.index("int sqrl_relu3_tensor("):]
    body = body[:body.index("\n}\n")]
    assert len(re.findall(r"\bfor \(", body)) == 1


@pytest.fixture(scope="module", params=["plain", "blas"])
def gmm(request):
    """(package built with each backend, the independent reference module, the backend)."""
    pkg = ksbuild.build(ROOT / "examples/gmm/manifest.toml", backend=request.param)
    return pkg, load(ROOT / "examples/gmm/reference.py"), request.param


@pytest.mark.parametrize("form", ["gmm", "gmm_loop"])
@pytest.mark.parametrize("d, K, n", [(2, 5, 20), (3, 4, 7), (10, 25, 60)])
def test_gmm_float64_matches_torch_autograd(gmm, form, d, K, n):
    """Objective vs a numpy oracle, gradient vs torch.autograd: ADBench's metric below 1e-8."""
    pkg, ref, _ = gmm
    data = ref.make_data(d, K, n, seed=d + K + n)
    args = [data[k] for k in ("alphas", "means", "icf", "x")] + [data["gamma"], data["m"]]
    value = getattr(pkg, form)(*args)
    assert ref.rel_error(np.array(value), np.array(ref.gmm_objective_numpy(*args))) < 1e-8
    want_value, *want = ref.gmm_grad_torch(data)
    assert ref.rel_error(np.array(value), np.array(want_value)) < 1e-8
    for got, w in zip(getattr(pkg, form + "_grad")(*args), want):
        assert ref.rel_error(got, w) < 1e-8


def test_gmm_float32_is_close_to_float64(gmm):
    pkg, ref, _ = gmm
    data = ref.make_data(4, 6, 50, seed=3)
    args = [data[k] for k in ("alphas", "means", "icf", "x")] + [data["gamma"], data["m"]]
    a32 = [np.asarray(a, np.float32) if isinstance(a, np.ndarray) else a for a in args]
    assert pkg.gmm_f32(*a32) == pytest.approx(pkg.gmm(*args), rel=1e-5)
    for g32, g64 in zip(pkg.gmm_f32_grad(*a32), pkg.gmm_grad(*args)):
        assert g32.dtype == np.float32
        np.testing.assert_allclose(g32, g64, rtol=1e-3, atol=1e-4)


def test_gmm_blas_backend_calls_gemm_and_plain_does_not(gmm):
    """With backend = "blas" the batched products are ks::gemm calls; the plain build stays loops."""
    pkg, _, backend = gmm
    source = (pkg.root / "share/gmm/src/gmm.cpp").read_text()
    assert ("ks::gemm<double>(" in source) == (backend == "blas")
    assert ("ks::gemm<float>(" in source) == (backend == "blas")


def test_gmm_source_runs_under_torch(gmm):
    """The kernel file is plain PyTorch: run it and compare with the independent reference."""
    pkg, ref, _ = gmm
    src = load(ROOT / "examples/gmm/gmm.py")
    data = ref.make_data(3, 4, 9, seed=5)
    t = [torch.tensor(data[k]) for k in ("alphas", "means", "icf", "x")]
    want = ref.gmm_objective_numpy(*[data[k] for k in ("alphas", "means", "icf", "x")], data["gamma"], data["m"])
    for fn in (src.gmm_objective, src.gmm_objective_loop):
        value = fn(*t, data["gamma"], data["m"]).item()
        assert ref.rel_error(np.array(value), np.array(want)) < 1e-10


def test_workspace_is_reused_per_thread(gmm):
    """The loader keeps one workspace per thread: calls from many threads at once, at different
    sizes, each get their own answer (ctypes releases the GIL while the C code runs)."""
    from concurrent.futures import ThreadPoolExecutor

    pkg, ref, _ = gmm
    sizes = [(2, 3, 40), (5, 4, 300), (3, 6, 120), (4, 2, 900)] * 3
    datas = [ref.make_data(d, K, n, seed=i) for i, (d, K, n) in enumerate(sizes)]
    args = [[data[k] for k in ("alphas", "means", "icf", "x")] + [data["gamma"], data["m"]] for data in datas]
    alone = [pkg.gmm_grad(*a) for a in args]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda a: pkg.gmm_grad(*a), args * 3))
    for got, want in zip(together, alone * 3):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_zero_sized_dims_need_no_workspace(sqrl_pkg):
    """P_E_workspace_size is 0 for n = 0, so a NULL workspace is fine there (the loader passes NULL)."""
    import ctypes
    lib = sqrl_pkg.lib
    size = lib.sqrl_sqrl_vjp_workspace_size
    size.restype, size.argtypes = ctypes.c_size_t, [ctypes.c_int64]
    assert size(0) == 0 and size(5) > 0
    fn = lib.sqrl_sqrl_vjp
    fn.restype = ctypes.c_int
    out = (ctypes.c_float * 1)()
    assert fn(ctypes.c_int64(0), None, ctypes.c_float(1.0), out, None) == 0
    assert fn(ctypes.c_int64(5), None, ctypes.c_float(1.0), out, None) == 2  # err_null: 5 needs memory
    assert sqrl_pkg.sqrl_vjp(np.zeros(0, np.float32), 1.0).shape == (0,)
