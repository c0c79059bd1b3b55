"""PyTorch-style kernels (tests/frontend_kernels.py) against torch: values and torch.autograd
vector-Jacobian products, through the reference interpreter and compiled (one package)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import ksbuild
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.transforms.vjp import vjp_func

torch = pytest.importorskip("torch")

from conftest import DEBUG, ROOT  # noqa: E402

FILE = ROOT / "tests" / "frontend_kernels.py"
_spec = importlib.util.spec_from_file_location("frontend_kernels", FILE)
K = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(K)


def r(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape)


CASES = {
    "f_namespace": lambda: (r(4, 3),),
    "f_linear": lambda: (r(4, 3), r(2, 3), r(2)),
    "f_losses": lambda: (r(6), r(6, seed=1)),
    "f_methods": lambda: (r(3, 4),),
    "f_ellipsis": lambda: (r(3, 4, 2),),
    "f_fill": lambda: (r(5, 3),),
    "f_set_parts": lambda: (r(5, 4),),
    "f_running_sum": lambda: (r(7),),
    "f_detach": lambda: (r(6),),
    "f_dropout_eval": lambda: (r(5),),
    "f_masks": lambda: (r(6), r(6, seed=3)),
    "f_dtypes": lambda: (r(5),),
    "f_activations": lambda: (r(7),),
    "f_stats": lambda: (r(4, 3),),
    "f_max_dim": lambda: (r(5, 4),),
    "f_gather": lambda: (r(5, 4), np.array([0, 3, 1, 2, 3]), np.array([4, 0, 0, 2])),
    "f_losses_more": lambda: (r(6, 3), np.array([0, 2, 1, 1, 0, 2]), np.random.default_rng(5).random(6)),
    "f_shapes_more": lambda: (r(4, 3),),
    "f_matrix_more": lambda: (r(3, 3), r(3, 3, seed=2)),
    "f_inf_constants": lambda: (r(6),),
    "f_loops_reverse": lambda: (r(4), r(5)),
    "f_loops_iterables": lambda: (r(5, 3), r(5, seed=4)),
    "f_default_args": lambda: (r(4, 3),),
    "f_chunk_split": lambda: (r(8), r(3, 6)),
    "f_masked_fill": lambda: (r(4, 4), r(4, seed=2)),
    "f_casts_to": lambda: (r(5), np.array([3, -1, 0, 2, 7])),
    "f_one_hot_dim": lambda: (np.array([0, 2, 1, 2]), r(4, 3)),
    "f_module_consts": lambda: (r(5),),
    "f_asserts": lambda: (r(4, 3), r(4, seed=1)),
    "f_iterate_constants": lambda: (r(5), r(5, seed=2)),
    "f_more_torch": lambda: (r(4, 3), r(3, 2, seed=1), r(2, seed=2)),
    "f_append_rows": lambda: (r(4, 3), 0.5 * r(3, 3, seed=1)),
    "f_conv_pool": lambda: (r(2, 3, 6, 6), r(4, 3, 3, 3, seed=1), r(4, seed=2), r(2, 3, 3, seed=3)),
    "f_sort_search": lambda: (r(5, 4), r(6, seed=1)),
    "f_table_lookup": lambda: (r(7),),
    "f_no_grad": lambda: (r(6), r(6, seed=2)),
    "f_pool_ties": lambda: (np.random.default_rng(4).integers(0, 3, (2, 3, 4, 6)).astype(np.float64),),
}

# dims the interpreter cannot read off the argument shapes (an input of "float[4 * h]" gives 4*h, not h)
ENVS = {"f_chunk_split": {"h": 2}}


def torch_run(name, args):
    """(torch results as arrays, their vjp with cotangents from a fixed rng; int inputs get no gradient)."""
    ts = [torch.tensor(a, requires_grad=np.asarray(a).dtype.kind == "f") for a in args]
    floats = [t for t in ts if t.requires_grad]
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = getattr(K, name)(*ts)
    finally:
        torch.set_default_dtype(old)
    ct = np.random.default_rng(7).standard_normal(tuple(out.shape))
    grads = torch.autograd.grad(out, floats, torch.tensor(ct), allow_unused=True)
    grads = [np.zeros(tuple(t.shape)) if g is None else g.numpy() for t, g in zip(floats, grads)]
    return out.detach().numpy(), ct, grads


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreter_matches_torch(name):
    args = CASES[name]()
    want, ct, grads = torch_run(name, args)
    f = compile_python_kernel(FILE, name, "f64")
    env = ENVS.get(name)
    np.testing.assert_allclose(eval_func(f, list(args), env)[0], want, rtol=1e-12, atol=1e-12)
    got = eval_func(vjp_func(f), list(args) + [ct], env)
    for g, w in zip(got, grads):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    folder = tmp_path_factory.mktemp("frontend")
    (folder / "k.py").write_text(FILE.read_text())
    kernels = "".join(f'[kernels.{n}]\npython = "k.py:{n}"\n' for n in CASES)
    exports = "".join(f'{n} = "{n}"\n{n}_vjp = "vjp({n})"\n' for n in CASES)
    (folder / "manifest.toml").write_text(f'[package]\nname = "frontend"\n[build]\ndtype = "float64"\n'
                                          f'{kernels}[exports]\n{exports}')
    return ksbuild.build(folder / "manifest.toml", optimize=DEBUG)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_matches_torch(package, name):
    args = CASES[name]()
    want, ct, grads = torch_run(name, args)
    dims = {"dims": ENVS[name]} if name in ENVS else {}
    np.testing.assert_allclose(getattr(package, name)(*args, **dims), want, rtol=1e-11, atol=1e-11)
    got = getattr(package, f"{name}_vjp")(*args, ct if np.ndim(ct) else float(ct), **dims)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, grads):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-11)


SCALAR_CASES = {"f_math_more": [(0.7, -1.3), (-2.0, 0.4), (0.1, 2.2)]}


@pytest.mark.parametrize("name", sorted(SCALAR_CASES))
def test_scalar_math_against_python_and_finite_differences(name):
    """math.* kernels: the value against Python's math, the vjp against central differences."""
    f = compile_python_kernel(FILE, name, "f64")
    g = vjp_func(f)
    for args in SCALAR_CASES[name]:
        want = getattr(K, name)(*args)
        assert float(eval_func(f, list(args))[0]) == pytest.approx(want, rel=1e-12)
        grads = eval_func(g, list(args) + [1.0])
        for k in range(len(args)):
            h = 1e-6
            up = list(args)
            dn = list(args)
            up[k] += h
            dn[k] -= h
            fd = (getattr(K, name)(*up) - getattr(K, name)(*dn)) / (2 * h)
            assert float(grads[k]) == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_rank0_tensor_annotation_is_a_scalar(tmp_path):
    """'float[]' (a 0-d tensor, as torch.amax(x, dim=0) of a vector returns) annotates a scalar, like float."""
    from ksbuild.frontends.python.tensors import parse_type_text
    from ksbuild.ir.types import Type

    assert parse_type_text("float[]", "f64") == Type("f64") == parse_type_text("float", "f64")
    assert parse_type_text("i32[ ]", "f32") == Type("i32")
    (tmp_path / "k.py").write_text('import torch\n\n\ndef peak(x: "float[n]") -> "float[]":\n'
                                   '    return torch.amax(x, dim=0)\n')
    f = compile_python_kernel(tmp_path / "k.py", "peak", "f64")
    x = np.array([0.5, 3.0, -1.0])
    assert eval_func(f, [x])[0] == 3.0
