"""Ordinary kernels that crashed, hung or failed in C++ (issue 32): each now works (checked against torch or
the kernel run by Python) or is a located error.

One package holds the kernels that work: the torch function forms of the shape methods, a dim carried through
a loop, a sum of 5000 terms, helpers nested 300 calls deep (each with its vjp and jvp) and 24 ifs in a row
that may each return or go on.
"""
from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from conftest import DEBUG, build_kernel_file

from ksbuild.errors import KsbuildError
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.manifest import load_manifest

torch = pytest.importorskip("torch")

N_TERMS, N_CALLS, N_IFS = 5000, 300, 24


def _nested_ifs(n: int, name: str = "ifs") -> str:
    """n ifs in a row, each returning on some paths and going on on others."""
    lines = [f"def {name}(x: float) -> float:", "    y = x"]
    for i in range(n):
        lines += [f"    if x > {i}.5:", f"        if x > {i}.75:", f"            return y * {i + 1}.0",
                  f"        y = y + {i}.25"]
    return "\n".join(lines + ["    return y * x\n"])


KERNELS = f'''
import torch


def forms(x: "float[n, m]") -> "float[m, n]":
    a = torch.transpose(x, 0, 1)
    b = torch.reshape(torch.permute(x, (1, 0)), (x.shape[1], x.shape[0]))
    c = torch.squeeze(torch.unsqueeze(a, 0), 0)
    return a + b * 2.0 + c * 3.0 + torch.transpose(x, dim0=1, dim1=0) * 4.0


def dim_carry(x: "float[n]") -> float:
    k = x.shape[0]
    s = 0.0
    for i in range(3):
        k += 1
        s = s + k * x[i]
    return s + k


def long_sum(x: float) -> float:
    return {" + ".join(f"x * {i % 7}.5" for i in range(N_TERMS))}


def h0(x: float) -> float:
    return x * 1.0001
''' + "".join(f"\n\ndef h{i}(x: float) -> float:\n    return h{i - 1}(x) * 0.999 + 0.5\n"
          for i in range(1, N_CALLS)) + f'''

def deep_calls(x: float) -> float:
    return h{N_CALLS - 1}(x)


''' + _nested_ifs(N_IFS)

NAMES = ("forms", "dim_carry", "long_sum", "deep_calls", "ifs")
SCALAR = ("long_sum", "deep_calls", "ifs")
MANIFEST = '[package]\nname = "robust"\nversion = "0.1.0"\n\n[build]\ndtype = "float64"\n\n' + \
    "".join(f'[kernels.{k}]\npython = "k.py:{k}"\n\n' for k in NAMES) + "[exports]\n" + \
    "".join(f'{k} = "{k}"\n' for k in NAMES) + \
    "".join(f'{k}_vjp = "vjp({k})"\n{k}_jvp = "jvp({k})"\n' for k in SCALAR)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(30_000)  # (CPython's own compiler needs it for the sum of 5000 terms: the oracle)
    try:
        return build_kernel_file(tmp_path_factory.mktemp("robust"), KERNELS, MANIFEST, "robust_kernels", DEBUG)
    finally:
        sys.setrecursionlimit(limit)


def test_torch_function_forms_of_shape_methods(built):
    pkg, src = built
    x = torch.randn(3, 4, dtype=torch.float64)
    np.testing.assert_allclose(pkg.forms(x.numpy()), src.forms(x).numpy(), rtol=1e-12)


def test_a_dim_carried_through_a_loop(built):
    pkg, src = built
    x = np.arange(1.0, 6.0)
    assert pkg.dim_carry(x) == pytest.approx(src.dim_carry(x), rel=1e-12)


@pytest.mark.parametrize("name", SCALAR)
def test_deep_kernels_values_and_derivatives(built, name):
    """A sum of 5000 terms, helpers nested 300 deep and 24 ifs in a row: values, vjp and jvp against torch."""
    pkg, src = built
    for x0 in (-0.3, 0.9, 3.6, 7.8, 30.0):
        x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
        y = getattr(src, name)(x)
        (dx,) = torch.autograd.grad(y, x)
        assert getattr(pkg, name)(x0) == pytest.approx(y.item(), rel=1e-12)
        assert getattr(pkg, f"{name}_vjp")(x0, 1.0) == pytest.approx(dx.item(), rel=1e-12)
        assert getattr(pkg, f"{name}_jvp")(x0, 1.0) == pytest.approx(dx.item(), rel=1e-12)


def _ir_size(tmp_path, n: int) -> int:
    from ksbuild.exports import build_exports
    (tmp_path / "k.py").write_text(_nested_ifs(n, "k"))
    (tmp_path / "manifest.toml").write_text('[package]\nname = "ifs"\nversion = "0.1.0"\n[build]\ndtype = "float64"\n'
                                           '[kernels.k]\npython = "k.py:k"\n[exports]\nk = "k"\nk_vjp = "vjp(k)"\n'
                                           'k_v = "vmap(k)"\n')
    from ksbuild.ir.printer import print_func
    return sum(len(print_func(e.func).splitlines()) for e in build_exports(load_manifest(tmp_path / "manifest.toml")))


def test_ifs_that_may_return_grow_linearly(tmp_path):
    """Each if compiled the rest of the function into both its branches: the IR doubled with every if (N = 8
    took 90 s). Now the IR (plain, vjp and vmap) grows linearly and N = 48 takes seconds of CPU (this process's:
    the wall clock took 136 s for them at load 15, and failed)."""
    sizes = {n: _ir_size(tmp_path, n) for n in (12, 24)}
    assert sizes[24] < 2.3 * sizes[12], sizes
    start = time.process_time()
    _ir_size(tmp_path, 48)
    assert time.process_time() - start < 60


# ---- located errors --------------------------------------------------------------------------------------------

def _error(tmp_path, source: bytes | str, name: str = "k") -> KsbuildError:
    path = tmp_path / "k.py"
    path.write_bytes(source if isinstance(source, bytes) else source.encode())
    with pytest.raises(KsbuildError) as info:
        compile_python_kernel(path, name, "f64")
    return info.value


def test_a_file_that_is_not_utf8(tmp_path):
    err = _error(tmp_path, b"def k(x: float) -> float:\n    # caf\xe9\n    return x\n")
    assert (err.loc.line, err.loc.col) == (2, 9), str(err)
    assert "not UTF-8" in err.message and "0xe9" in err.message


def test_an_integer_constant_outside_int64(tmp_path):
    err = _error(tmp_path, "def k(n: int) -> int:\n    return n + 2 ** 63\n")
    assert err.loc.line == 2 and "9223372036854775808 does not fit in i64" in err.message, str(err)


@pytest.mark.parametrize("dim", ["delete", "new", "NULL", "int64_t", "workspace"])
def test_a_dim_named_like_a_cpp_word(tmp_path, dim):
    err = _error(tmp_path, f'def k(x: "float[{dim}]") -> "float[{dim}]":\n    return x * 2.0\n')
    assert err.loc.line == 1 and f"the dim name '{dim}'" in err.message and err.hint, str(err)


def test_a_dim_named_like_a_cpp_word_in_a_signature(tmp_path):
    (tmp_path / "k.py").write_text("def k(x):\n    return x\n")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "p"\nversion = "0.1.0"\n[kernels.k]\n'
                                            'python = "k.py:k"\nsignature = "(x: f64[delete]) -> f64[delete]"\n'
                                            '[exports]\nk = "k"\n')
    with pytest.raises(KsbuildError) as info:
        load_manifest(tmp_path / "manifest.toml")
    assert info.value.loc.line == 6 and "the dim name 'delete'" in info.value.message


def test_a_package_name_too_long_for_file_names(tmp_path):
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "{"a" * 300}"\nversion = "0.1.0"\n'
                                            '[kernels.k]\npython = "k.py:k"\n[exports]\nk = "k"\n')
    with pytest.raises(KsbuildError) as info:
        load_manifest(tmp_path / "manifest.toml")
    assert info.value.loc.line == 2 and "has 300 characters" in info.value.message
