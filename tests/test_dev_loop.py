"""The dev loop without torch: ksbuild.kernel / ksbuild.vmap on numpy arrays and Python numbers,
one source built in float32 and float64, strict dtypes, and errors that point at the user's code.
Oracles: the Python function itself (it runs as plain Python) and central finite differences."""
from __future__ import annotations

import importlib.util

import dev_kernels as dk
import numpy as np
import pytest
from conftest import ROOT

import ksbuild
from ksbuild.errors import KsbuildError
from ksbuild.packaging.runtime import CallError, DtypeError


def load(path, name):
    spec = importlib.util.spec_from_file_location(path.stem + "_dev", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


relu3 = load(ROOT / "examples/relu3/relu3.py", "relu3")
POINTS = [-2.0, -0.5, 0.0, 0.25, 0.5, 0.9, 1.0, 1.5, 3.0]


@pytest.fixture(scope="module")
def vrelu3():
    return ksbuild.vmap(relu3)


def test_vmap_of_an_if_in_both_dtypes(vrelu3):
    for dtype in (np.float32, np.float64):
        x = np.array(POINTS, dtype)
        y = vrelu3(x)
        assert y.dtype == dtype
        np.testing.assert_allclose(y, [relu3(float(v)) for v in x], rtol=1e-6 if dtype == np.float32 else 1e-14)
    assert vrelu3.build("float32").root != vrelu3.build("float64").root  # one source, two packages


def test_vjp_jvp_match_finite_differences(vrelu3):
    x = np.array([-1.0, 0.2, 0.6, 2.0])
    h = 1e-6
    fd = np.array([(relu3(v + h) - relu3(v - h)) / (2 * h) for v in x])
    ct = np.array([1.0, 2.0, -1.0, 0.5])
    np.testing.assert_allclose(vrelu3.vjp(x, ct), fd * ct, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(vrelu3.jvp(x, ct), fd * ct, rtol=1e-6, atol=1e-9)


def test_scalar_kernel_and_grad():
    k = ksbuild.kernel(dk.scale)
    assert k(1.5, 2.0) == pytest.approx(dk.scale(1.5, 2.0), rel=1e-15)
    dx, da = k.grad(1.5, 2.0)
    assert dx == pytest.approx(2 * 2.0 * 1.5 + 0.5) and da == pytest.approx(1.5 ** 2)
    assert k.vjp(1.5, 2.0, 3.0) == pytest.approx((3 * dx, 3 * da))


def test_in_axes_and_int_arguments():
    vs = ksbuild.vmap(dk.scale, in_axes=(0, None))
    x = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(vs(x, 0.7), [dk.scale(v, 0.7) for v in x], rtol=1e-14)
    vp = ksbuild.vmap(dk.power, in_axes=(0, None))
    np.testing.assert_allclose(vp(x, 3), x ** 3, rtol=1e-14)
    with pytest.raises(DtypeError, match="i64"):
        vp(x, 3.0)  # a float for an int argument is never truncated


def test_extra_leading_axes_are_flattened_into_the_mapped_axis(vrelu3):
    x = np.linspace(-2, 3, 12).reshape(3, 4)
    np.testing.assert_allclose(vrelu3(x), np.vectorize(relu3)(x), rtol=1e-14)


def test_no_silent_casts(vrelu3, relu3_pkg):
    x64 = np.linspace(-1, 2, 4)
    with pytest.raises(DtypeError, match="float64 but the export takes f32"):
        relu3_pkg.vrelu3(x64)
    with pytest.raises(DtypeError):
        relu3_pkg.relu3(np.float64(0.5))
    with pytest.raises(DtypeError):
        relu3_pkg.vrelu3(np.arange(4))  # int64 array
    assert relu3_pkg.vrelu3([0.5, 2.0]).dtype == np.float32  # Python lists have no dtype: converted
    with pytest.raises(KsbuildError, match="mix float dtypes"):
        ksbuild.vmap(dk.scale, in_axes=(0, None))(x64, np.float32(1.0))
    with pytest.raises(KsbuildError, match="float32 or float64"):
        vrelu3(x64.astype(np.float16))


def test_repeated_calls_take_the_fast_path_and_still_check(relu3_pkg):
    """After a first call with some shapes, calls with the same shapes skip the full checks; another dtype,
    a non-contiguous array, another length or a list still go through them (and give the same answers)."""
    x = np.linspace(-1, 2, 6).astype(np.float32)
    want = np.array([relu3(float(v)) for v in x], np.float32)
    for _ in range(3):
        np.testing.assert_allclose(relu3_pkg.vrelu3(x), want, rtol=1e-6)
    assert relu3_pkg.vrelu3._fast_plans  # remembered
    np.testing.assert_allclose(relu3_pkg.vrelu3(np.repeat(x, 2)[::2]), want, rtol=1e-6)  # strided: copied
    np.testing.assert_allclose(relu3_pkg.vrelu3(x[:4]), want[:4], rtol=1e-6)
    np.testing.assert_allclose(relu3_pkg.vrelu3(list(x)), want, rtol=1e-6)
    with pytest.raises(DtypeError, match="float64 but the export takes f32"):
        relu3_pkg.vrelu3(x.astype(np.float64).reshape(6))
    with pytest.raises(CallError, match="dimension"):
        relu3_pkg.vrelu3(x.reshape(2, 3))


def test_messages_name_the_parameter_as_written(tmp_path):
    """An int parameter named k (k1 in C, where k is taken) and a str argument: the message says 'k' and 'a str'."""
    (tmp_path / "kk.py").write_text('def scale(x: "float[n]", k: int) -> "float[n]":\n    return x * k\n')
    f = ksbuild.kernel(load(tmp_path / "kk.py", "scale"))
    np.testing.assert_allclose(f(np.ones(3, np.float32), 2), [2.0, 2.0, 2.0])
    with pytest.raises(DtypeError, match="argument 'k' takes i64, got a str"):
        f(np.ones(3, np.float32), "a")


def test_parameter_defaults_apply_and_messages_name_the_kernel():
    """def scaled(x, scale=2.0, flag=False): the dev loop fills in the defaults as Python does (it said 'fn() takes
    3 arguments, 1 given': the export's role, not the kernel's name)."""
    k = ksbuild.kernel(dk.scaled)
    assert k(3.0) == dk.scaled(3.0) and k(3.0, 5.0) == dk.scaled(3.0, 5.0) and k(3.0, 5.0, True) == 15.0
    with pytest.raises(TypeError, match=r"^scaled\(\) missing argument\(s\): x$"):
        k()


def test_free_dims_are_passed_by_name(relu3_pkg):
    with pytest.raises(CallError, match="not dims of this export"):
        relu3_pkg.vrelu3(np.zeros(3, np.float32), dims={"m": 3})


def test_exports_that_cannot_be_derived_are_dropped_with_their_error():
    k = ksbuild.kernel(dk.is_negative)
    assert k(-1.0) is True and k(2.0) is False
    with pytest.raises(KsbuildError, match="no float result"):
        k.vjp(1.0, 1.0)


def test_errors_point_at_the_users_source():
    with pytest.raises(KsbuildError) as e:
        ksbuild.kernel(dk.broken)(2.0)
    assert "dev_kernels.py" in str(e.value) and "while" in str(e.value)
    with pytest.raises(KsbuildError, match="module-level"):
        ksbuild.kernel(lambda x: x)
    with pytest.raises(KsbuildError, match="in_axes"):
        ksbuild.vmap(dk.scale, in_axes=(1, None))


def test_manifest_is_written_to_the_cache(vrelu3):
    text = vrelu3.manifest("float64").read_text()
    assert 'dtype = "float64"' in text and 'fn_bwd = "bwd(vmap(relu3))"' in text


def test_bwd_of_a_linear_kernel_reads_no_primal():
    """bwd(f) takes the primals; here it uses none of them (the C compiles with -Werror all the same)."""
    pkg = ksbuild.kernel(dk.double).build("float64")
    x, ct = np.arange(3.0), np.array([1.0, -2.0, 0.5])
    dx, ds = pkg.fn_bwd(x, 0.3, ct)
    np.testing.assert_array_equal(dx, 2 * ct)
    assert ds == 0.0
    np.testing.assert_array_equal(pkg.fn_vjp(x, 0.3, ct)[0], dx)
