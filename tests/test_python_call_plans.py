"""The Python call's plans: what a call with given input shapes needs (dims, output shapes, workspace size) is
computed once per shapes and reused (runtime.Export.plan). Reuse must never change an answer or skip a check:
new shapes after cached ones, out=, wrong dtypes and shapes after a cached call, threads calling with different
shapes at once, torch tensors (eager and through the custom op)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import build_kernel_file

from ksbuild.packaging.runtime import CallError, DtypeError

KERNELS = '''import torch


def mix(x: "float[n, d]", w: "float[d, k]") -> tuple["float[n, k]", "float[n]"]:
    h = torch.tanh(x @ w)
    return h, torch.sum(h * h, 1)


def shift(x: "float[n]", a: float) -> "float[n]":
    return x + a
'''

MANIFEST = '''[package]
name = "plans"
[build]
dtype = "float64"
[kernels.mix]
python = "k.py:mix"
[kernels.shift]
python = "k.py:shift"
[exports]
mix = "mix"
shift = "shift"
'''


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return build_kernel_file(tmp_path_factory.mktemp("plans"), KERNELS, MANIFEST, "plans_k")[0]


def mix_reference(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.tanh(x @ w)
    return h, (h * h).sum(1)


def inputs(n: int, d: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), rng.standard_normal((d, k))


def assert_mix(got, x, w) -> None:
    for g, want in zip(got, mix_reference(x, w)):
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


def test_new_shapes_after_cached_ones_give_their_own_dims_and_results(pkg):
    """Each shape signature has its own plan; going back to an earlier one reuses it."""
    shapes = [(3, 4, 5), (7, 2, 3), (3, 4, 5), (3, 4, 2), (1, 1, 1), (7, 2, 3)]
    for n, d, k in shapes:
        x, w = inputs(n, d, k, seed=n)
        assert_mix(pkg.mix(x, w), x, w)
        plan = pkg.mix.plan([x.shape, w.shape])
        assert dict(plan.dims) == {"n": n, "d": d, "k": k}
        assert plan.outs == (((n, k), np.dtype(np.float64)), ((n,), np.dtype(np.float64)))
        assert plan.ws_size == pkg.mix.ws_fn(n, d, k)
    assert {((3, 4), (4, 5)), ((3, 4), (4, 2)), ((7, 2), (2, 3)), ((1, 1), (1, 1))} <= set(pkg.mix._fast_plans)


def test_repeated_calls_skip_the_conversions(pkg, monkeypatch):
    """Once a call's shapes are known, numpy arrays and torch tensors of the right dtypes go straight to C."""
    from ksbuild.packaging import runtime, torch_ops

    x, w = inputs(3, 2, 4)
    pkg.mix(x, w)
    tx, tw = torch_ops.torch.from_numpy(x), torch_ops.torch.from_numpy(w)
    pkg.mix(tx, tw)
    monkeypatch.setattr(runtime, "_as_array", None)
    monkeypatch.setattr(torch_ops, "_tensor", None)
    assert_mix(pkg.mix(x, w), x, w)
    assert_mix([g.numpy() for g in pkg.mix(tx, tw)], x, w)


def test_out_arrays_after_a_cached_call(pkg):
    x, w = inputs(4, 3, 2)
    pkg.mix(x, w)
    out = (np.full((4, 2), np.nan), np.full(4, np.nan))
    got = pkg.mix(x, w, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    assert_mix(out, x, w)
    with pytest.raises(CallError, match=r"out= for mix must be a contiguous f64 array of shape \(4, 2\)"):
        pkg.mix(x, w, out=(np.empty((2, 4)), np.empty(4)))
    with pytest.raises(CallError, match="out= for mix must be a contiguous f64"):
        pkg.mix(x, w, out=(np.empty((4, 2), np.float32), np.empty(4)))
    frozen = np.empty((4, 2))
    frozen.flags.writeable = False
    with pytest.raises(CallError, match="read-only"):
        pkg.mix(x, w, out=(frozen, np.empty(4)))
    strided = np.empty((4, 4))[:, ::2]
    with pytest.raises(CallError, match="must be a contiguous"):
        pkg.mix(x, w, out=(strided, np.empty(4)))


def test_wrong_dtypes_and_shapes_after_a_cached_call_still_raise(pkg, relu3_pkg):
    x, w = inputs(4, 3, 2)
    pkg.mix(x, w)
    with pytest.raises(DtypeError, match="argument 'x' is float32 but the export takes f64"):
        pkg.mix(x.astype(np.float32), w)
    with pytest.raises(CallError, match="dimension d is 3 elsewhere but 2 here"):
        pkg.mix(x, w[:2])
    with pytest.raises(CallError, match="must have 2 dimension"):
        pkg.mix(x.reshape(-1), w)
    a = np.linspace(-2, 3, 16, dtype=np.float32)
    relu3_pkg.vrelu3(a)
    with pytest.raises(DtypeError, match="float64 but the export takes f32"):
        relu3_pkg.vrelu3(a.astype(np.float64))
    with pytest.raises(CallError, match="dimension"):
        relu3_pkg.vrelu3(a.reshape(4, 4))
    with pytest.raises(DtypeError, match="float32 but the export takes f64"):
        pkg.shift(a, 1.0)


def test_inputs_the_fast_path_leaves_to_the_full_one(pkg):
    """Strided, read-only, big-endian and list inputs of cached shapes: right answers (or the usual error)."""
    x, w = inputs(5, 3, 2)
    pkg.mix(x, w)
    wide = np.empty((5, 6))
    wide[:, ::2] = x
    assert_mix(pkg.mix(wide[:, ::2], w), x, w)
    frozen = x.copy()
    frozen.flags.writeable = False
    assert_mix(pkg.mix(frozen, w), x, w)
    with pytest.raises(DtypeError, match="is >f8 but the export takes f64"):
        pkg.mix(x.astype(">f8"), w)
    assert_mix(pkg.mix(x.tolist(), w), x, w)
    np.testing.assert_allclose(pkg.shift(x[:, 0].copy(), 2.0), x[:, 0] + 2.0)
    np.testing.assert_allclose(pkg.shift(x[:, 0].copy(), 2.0), x[:, 0] + 2.0)  # scalar input: full path, cached plan


def test_plans_are_bounded(relu3_pkg):
    f = relu3_pkg.vrelu3
    for n in range(1, 150):
        a = np.linspace(-2, 3, n, dtype=np.float32)
        np.testing.assert_allclose(f(a), f(a.copy()), rtol=0)
        assert len(f._fast_plans) <= 64
    a = np.array([-1.0, 0.5, 2.0], np.float32)
    np.testing.assert_allclose(f(a), [0.0, 0.5 ** 3 / 3, 2.0 - 2.0 / 3.0], rtol=1e-6)


def test_two_threads_with_different_shapes_at_once(pkg):
    """ctypes releases the GIL during the C call: each thread has its own workspace, sized for its own shapes."""
    cases = [inputs(9, 7, 5, seed=1), inputs(2, 3, 40, seed=2)]
    wants = [mix_reference(x, w) for x, w in cases]
    assert pkg.mix.plan([c.shape for c in cases[0]]).ws_size != pkg.mix.plan([c.shape for c in cases[1]]).ws_size
    start, errors = threading.Barrier(2), []

    def work(i: int) -> None:
        x, w = cases[i]
        start.wait()
        for _ in range(300):
            got = pkg.mix(x, w)
            if not all(np.allclose(g, want, rtol=1e-12, atol=1e-12) for g, want in zip(got, wants[i])):
                errors.append(i)
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_torch_calls_share_the_plans_and_the_checks(pkg):
    torch = pytest.importorskip("torch")
    x, w = inputs(6, 4, 3)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    for _ in range(2):
        got = pkg.mix(tx, tw)
        assert all(isinstance(g, torch.Tensor) for g in got)
        assert_mix([g.numpy() for g in got], x, w)
    assert_mix([g.numpy() for g in pkg.mix(tx.T.contiguous().T, tw)], x, w)  # non-contiguous: copied
    x2, w2 = inputs(2, 4, 7, seed=3)
    assert_mix([g.numpy() for g in pkg.mix(torch.from_numpy(x2), torch.from_numpy(w2))], x2, w2)
    op = pkg.torch_ops().ops["mix"]
    for a, b in ((x, w), (x2, w2), (x, w)):
        assert_mix([g.numpy() for g in op(torch.from_numpy(a), torch.from_numpy(b))], a, b)
    with pytest.raises(DtypeError, match="is torch.float32 but the export takes f64"):
        pkg.mix(tx.float(), tw)
    with pytest.raises(CallError, match="must have 2 dimension"):
        pkg.mix(tx.reshape(-1), tw)
    with pytest.raises(CallError, match="dimension d is 4 elsewhere but 3 here"):
        pkg.mix(tx, tw[:3])
