"""The tensor kernel corpus (tests/tensor_kernels.py) checked against torch.

The kernels are plain PyTorch code, so torch is the oracle. For each case of the table `CASES`
(a kernel, an input factory with a fixed seed, and the vmap in_axes):
  (a) test_torch_oracle_sane: the kernel runs under torch in float64, its results have the shapes its
      annotations promise, branch cases really are in the branch they name, and torch.autograd's
      vector-Jacobian product equals central finite differences;
  (b) test_compiled: one package (ksbuild.build, float64) exporting NAME, NAME_vjp = vjp(NAME) and
      vNAME = vmap(NAME) for every kernel, compared with torch: values, vjp against
      torch.autograd.grad with a random cotangent, and vmap over 3 lanes against a loop of torch calls;
  (c) test_interpreter_*: the ksbuild IR (compile_python_kernel + the numpy interpreter eval_func) of
      the kernel, its vjp and its vmap, against the same torch results.
Float scalars are given to torch as 0-d float64 tensors (so autograd sees them) and to ksbuild as
Python floats; int scalars are Python ints everywhere, int tensors int64 arrays.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import typing
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from conftest import DEBUG

import ksbuild
from ksbuild.errors import KsbuildError
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.transforms.vjp import vjp_func
from ksbuild.transforms.vmap import fresh_dim, vmap_func

KERNELS_FILE = Path(__file__).with_name("tensor_kernels.py")
_spec = importlib.util.spec_from_file_location("tensor_kernels", KERNELS_FILE)
K = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(K)

N_LANES = 3  # vmap batch size
FD_STEP = 1e-6


@pytest.fixture(autouse=True, scope="module")
def _torch_float64():
    """Factory functions in the kernels (zeros, eye, full, ...) take the build dtype, i.e. float64."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


# ---- annotations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgType:
    is_float: bool
    dims: tuple | None  # None: a scalar

    @property
    def is_scalar(self) -> bool:
        return self.dims is None


def parse_type(ann) -> ArgType:
    if ann in (float, "float"):
        return ArgType(True, None)
    if ann in (int, bool, "int", "bool"):
        return ArgType(False, None)
    m = re.fullmatch(r"\s*(\w+)\[(.*)\]\s*", ann)
    assert m, f"bad annotation {ann!r}"
    assert m[1] in ("float", "f64", "i64"), ann
    dims = tuple(int(d) if d.strip().isdigit() else d.strip() for d in m[2].split(","))
    return ArgType(m[1] != "i64", dims)


def param_types(name: str) -> list[ArgType]:
    fn = getattr(K, name)
    return [parse_type(a) for k, a in fn.__annotations__.items() if k != "return"]


def result_types(name: str) -> list[ArgType]:
    ret = getattr(K, name).__annotations__["return"]
    if typing.get_origin(ret) is tuple:
        return [parse_type(a) for a in typing.get_args(ret)]
    return [parse_type(ret)]


# ---- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    kernel: str
    make: Callable[[np.random.Generator], tuple]  # the arguments: float64/int64 arrays, floats, ints
    seed: int
    batched: tuple | None = None  # vmap in_axes as a mask; default: everything but int scalars
    label: str = ""  # distinguishes several cases of one kernel
    region: Callable[[list], bool] | None = None  # True when the vmap lanes are in the branches the case is for

    @property
    def id(self) -> str:
        return f"{self.kernel}-{self.label}" if self.label else self.kernel

    def __str__(self) -> str:
        return self.id

    @property
    def types(self) -> list[ArgType]:
        return param_types(self.kernel)

    @property
    def mask(self) -> list[bool]:
        if self.batched is not None:
            return list(self.batched)
        return [t.is_float or not t.is_scalar for t in self.types]

    def args(self, lane: int = 0) -> tuple:
        return self.make(np.random.default_rng(self.seed + 1000 * lane))

    def rng(self, salt: str) -> np.random.Generator:
        return np.random.default_rng(zlib.crc32(f"{self.id}/{salt}".encode()))


def randn(rng, *shape, scale=1.0):
    return scale * rng.standard_normal(shape)


def unit(rng, d):
    v = rng.standard_normal(d)
    return v / np.linalg.norm(v)


def rk2_args(d, S):
    return lambda r: (randn(r, d, d, scale=0.8), randn(r, d), np.cumsum(0.05 + 0.1 * r.random(S)))


def lotka_args(r):
    theta = np.array([1.0, 0.5, 0.4, 0.8]) + randn(r, 4, scale=0.05)
    return theta, 1.0 + 0.5 * r.random(2), 0.05, 12


def elman_args(T):
    return lambda r: (randn(r, T, 2), randn(r, 4, scale=0.5), randn(r, 4, 2), randn(r, 4, 4, scale=0.5),
                      randn(r, 4, scale=0.1))


# point_segment_distance: t in a region of the parameter along the segment
def segment_args(d, lo, hi):
    def make(r):
        a, b = randn(r, d), randn(r, d)
        ab = b - a
        off = randn(r, d, scale=0.5)
        off -= off @ ab / (ab @ ab) * ab
        return a + r.uniform(lo, hi) * ab + off, a, b
    return make


def segment_branch(p, a, b):
    t = (p - a) @ (b - a) / ((b - a) @ (b - a))
    return "before" if t < 0 else "after" if t > 1 else "inside"


# ray_sphere: a hit from outside, a miss (the line passes by), the sphere behind the origin, the origin inside
RAY_BRANCHES = ("hit", "miss", "behind", "inside")


def ray_args(kind):
    def make(r):
        k = RAY_BRANCHES[int(r.integers(4))] if kind is None else kind
        center, radius, u = randn(r, 3), 1.0 + 0.5 * r.random(), unit(r, 3)
        w = unit(r, 3)
        w -= (w @ u) * u
        w /= np.linalg.norm(w)
        if k == "inside":
            return center + 0.3 * radius * u, 2.0 * unit(r, 3), center, radius
        direction = {"hit": -u + 0.1 * w, "miss": -u + w, "behind": u + 0.2 * w}[k]
        return center + 4.0 * u, 1.7 * direction, center, radius
    return make


def ray_branch(origin, direction, center, radius):
    d = direction / np.linalg.norm(direction)
    oc = origin - center
    b, c = oc @ d, oc @ oc - radius ** 2
    if b * b - c < 0:
        return "miss"
    if c > 0 and b > 0:
        return "behind"
    return "inside" if c < 0 else "hit"


def in_branch(branch: Callable, name: str) -> Callable[[list], bool]:
    return lambda pts: all(branch(*p) == name for p in pts)


def mixes(branch: Callable) -> Callable[[list], bool]:
    return lambda pts: len({branch(*p) for p in pts}) >= 2


def huber_args(r):
    X, w = randn(r, 12, 3), randn(r, 3)
    return X, X @ w + randn(r, 12, scale=1.5), w + randn(r, 3, scale=0.2), 1.0


def huber_mixed(pts):
    """Every lane has rows on both sides of delta."""
    small = [np.abs(X @ w - y) <= delta for X, y, w, delta in pts]
    return all(s.any() and not s.all() for s in small)


def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def cholesky_args(d):
    return lambda r: (randn(r, d * (d - 1) // 2, scale=0.5), randn(r, d, scale=0.2), randn(r, d))


CASES = [
    Case("rk2_flow", rk2_args(3, 9), 1),
    Case("rk2_flow", rk2_args(1, 2), 2, label="d1"),
    Case("lotka_volterra", lotka_args, 3, batched=(True, True, False, False)),
    Case("elman_rnn", elman_args(6), 4),
    Case("elman_rnn", elman_args(1), 5, label="T1"),
    Case("ema_trend", lambda r: (randn(r, 8, 3), 0.3), 6, batched=(True, False)),
    Case("allen_cahn", lambda r: (randn(r, 10, scale=0.5), 1.0, 0.1, 6), 7, batched=(True, True, False, False)),
    Case("point_segment_distance", segment_args(2, -1.0, -0.1), 8, label="before",
         region=in_branch(segment_branch, "before")),
    Case("point_segment_distance", segment_args(3, 0.1, 0.9), 9, label="inside",
         region=in_branch(segment_branch, "inside")),
    Case("point_segment_distance", segment_args(3, 1.1, 2.0), 10, label="after",
         region=in_branch(segment_branch, "after")),
    Case("point_segment_distance", segment_args(3, -1.5, 2.5), 100, label="mixed", region=mixes(segment_branch)),
    Case("ray_sphere", ray_args("hit"), 12, label="hit", region=in_branch(ray_branch, "hit")),
    Case("ray_sphere", ray_args("miss"), 13, label="miss", region=in_branch(ray_branch, "miss")),
    Case("ray_sphere", ray_args("behind"), 14, label="behind", region=in_branch(ray_branch, "behind")),
    Case("ray_sphere", ray_args("inside"), 15, label="inside", region=in_branch(ray_branch, "inside")),
    Case("ray_sphere", ray_args(None), 105, label="mixed", region=mixes(ray_branch)),
    Case("huber_regression", huber_args, 17, region=huber_mixed),
    Case("gaussian_loglik", lambda r: (randn(r, 7, 3), randn(r, 3), randn(r, 3, scale=0.3)), 18),
    Case("softmax_xent", lambda r: (randn(r, 5, 4, scale=2.0), softmax_rows(randn(r, 5, 4))), 19),
    Case("nll_labels", lambda r: (randn(r, 6, 4, scale=2.0), r.integers(0, 4, 6)), 20),
    Case("pairwise_rank_loss", lambda r: (randn(r, 6), randn(r, 6)), 21),
    Case("layer_norm", lambda r: (randn(r, 5, 6), 1.0 + randn(r, 6, scale=0.1), randn(r, 6, scale=0.1)), 22,
         batched=(True, False, False)),
    Case("mlp2", lambda r: (randn(r, 5, 3), randn(r, 4, 3), randn(r, 4), randn(r, 2, 4), randn(r, 2)), 23,
         batched=(True, False, False, False, False)),
    Case("causal_attention", lambda r: (randn(r, 5, 3), randn(r, 5, 3), randn(r, 5, 2)), 24),
    Case("affine_coupling", lambda r: (randn(r, 5, 4), randn(r, 2, 4, scale=0.5), randn(r, 4, scale=0.1)), 25,
         batched=(True, False, False)),
    Case("bmm_pool", lambda r: (randn(r, 2, 3, 4), randn(r, 2, 4, 4)), 26),
    Case("bilinear_einsum", lambda r: (randn(r, 4, 3), randn(r, 2, 3, 5), randn(r, 4, 5)), 27,
         batched=(True, False, True)),
    Case("poly_eval", lambda r: (r.uniform(-1.0, 1.0, 6), randn(r, 4)), 28),
    Case("poly_eval", lambda r: (r.uniform(-1.0, 1.0, 3), randn(r, 2)), 29, label="p2"),
    Case("cholesky_energy", cholesky_args(3), 30),
    Case("cholesky_energy", cholesky_args(4), 31, label="d4"),
    Case("cov_summary", lambda r: (randn(r, 8, 3),), 32),
    Case("rbf_gram", lambda r: (randn(r, 4, 2), randn(r, 5, 2), 0.1 * r.standard_normal()), 33),
    Case("shared_left_product", lambda r: (randn(r, 7, 22), randn(r, 3, 22, 12), randn(r, 3, 7, 12)), 731,
         batched=(False, True, True)),
]
KERNEL_NAMES = list(dict.fromkeys(c.kernel for c in CASES))
cases = pytest.mark.parametrize("case", CASES, ids=str)


# ---- torch side ----------------------------------------------------------------------------------


def to_torch(case: Case, args: tuple, requires_grad: bool = False) -> tuple[list, list]:
    """(the arguments as torch values, the float leaves in order)."""
    out, leaves = [], []
    for v, t in zip(args, case.types):
        if t.is_float:
            x = torch.tensor(np.asarray(v, dtype=np.float64), dtype=torch.float64, requires_grad=requires_grad)
            leaves.append(x)
        elif t.is_scalar:
            x = int(v)
        else:
            x = torch.from_numpy(np.asarray(v, dtype=np.int64))
        out.append(x)
    return out, leaves


def as_list(x) -> list:
    return list(x) if isinstance(x, tuple) else [x]


def as_numpy(x) -> np.ndarray:
    return x.detach().numpy() if torch.is_tensor(x) else np.asarray(x, dtype=np.float64)


def torch_value(case: Case, args: tuple) -> list[np.ndarray]:
    targs, _ = to_torch(case, args)
    return [as_numpy(o) for o in as_list(getattr(K, case.kernel)(*targs))]


def cotangents(case: Case, args: tuple, salt: str = "ct") -> list:
    """One random cotangent per (float) result: an array of the result's shape, a float for a scalar."""
    rng = case.rng(salt)
    return [rng.standard_normal(w.shape) if w.ndim else float(rng.standard_normal()) for w in torch_value(case, args)]


def torch_vjp(case: Case, args: tuple, cts: list) -> list[np.ndarray]:
    """torch.autograd's cotangents of the float inputs, in order."""
    targs, leaves = to_torch(case, args, requires_grad=True)
    outs = as_list(getattr(K, case.kernel)(*targs))
    live = [(o, c) for o, c in zip(outs, cts) if torch.is_tensor(o) and o.requires_grad]
    grads = [None] * len(leaves)
    if live:
        grads = torch.autograd.grad([o for o, _ in live], leaves,
                                    [torch.as_tensor(np.asarray(c), dtype=torch.float64) for _, c in live],
                                    allow_unused=True)
    return [np.zeros(tuple(x.shape)) if g is None else g.numpy() for x, g in zip(leaves, grads)]


def lanes(case: Case) -> list[tuple]:
    """N_LANES argument tuples; unbatched arguments take their lane-0 value in every lane."""
    first = case.args(0)
    return [tuple(v if b else first[i] for i, (v, b) in enumerate(zip(case.args(j), case.mask)))
            for j in range(N_LANES)]


def stacked(case: Case, pts: list[tuple]) -> list:
    out = []
    for i, (b, t) in enumerate(zip(case.mask, case.types)):
        if not b:
            out.append(pts[0][i])
        else:
            out.append(np.stack([np.asarray(p[i], dtype=np.float64 if t.is_float else np.int64) for p in pts]))
    return out


def torch_vmap(case: Case, pts: list[tuple]) -> list[np.ndarray]:
    per_lane = [torch_value(case, p) for p in pts]
    return [np.stack([lane[k] for lane in per_lane]) for k in range(len(per_lane[0]))]


def assert_close(got, want: list[np.ndarray], rtol: float, what: str, atol: float = 1e-12) -> None:
    got = as_list(got)
    assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g, dtype=np.float64)
        assert g.shape == w.shape, f"{what}: result {k} has shape {g.shape}, expected {w.shape}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what}: result {k}")


# ---- (a) torch oracle ------------------------------------------------------------------------------


def test_cases_agree_on_vmap_axes():
    """One vmap export per kernel, so all cases of a kernel must batch the same arguments."""
    for name in KERNEL_NAMES:
        masks = {tuple(c.mask) for c in CASES if c.kernel == name}
        assert len(masks) == 1, (name, masks)
        assert len(next(iter(masks))) == len(param_types(name)), name


@cases
def test_torch_oracle_sane(case):
    types, rtypes = case.types, result_types(case.kernel)
    if case.region is not None:
        assert case.region(lanes(case)), f"{case.id}: the lanes are not in the branches the case is for"
    for args in lanes(case):
        # the arguments fit the annotations; dims bind consistently
        assert len(args) == len(types)
        env: dict = {}
        for v, t in zip(args, types):
            if t.is_scalar:
                assert isinstance(v, float if t.is_float else int), (case.id, v)
                continue
            a = np.asarray(v)
            assert a.dtype == (np.float64 if t.is_float else np.int64), (case.id, a.dtype)
            assert a.ndim == len(t.dims), (case.id, a.shape, t.dims)
            for d, s in zip(t.dims, a.shape):
                assert env.setdefault(d, s) == s if isinstance(d, str) else d == s, (case.id, t.dims, a.shape)
        # results: float64, finite, the annotated shapes
        targs, _ = to_torch(case, args)
        outs = as_list(getattr(K, case.kernel)(*targs))
        assert len(outs) == len(rtypes)
        for o, t in zip(outs, rtypes):
            assert torch.is_tensor(o) and o.dtype == torch.float64, (case.id, o)
            want = () if t.is_scalar else tuple(d if isinstance(d, int) else env[d] for d in t.dims)
            assert tuple(o.shape) == want, (case.id, tuple(o.shape), want)
            assert torch.isfinite(o).all(), case.id
    # autograd vs central finite differences of <ct, f(x)>, every element of every float input
    args = case.args(0)
    cts = cotangents(case, args)
    grads = torch_vjp(case, args, cts)
    floats = [i for i, t in enumerate(types) if t.is_float]
    assert len(grads) == len(floats)

    def phi(xs: list) -> float:
        return float(sum(np.sum(np.asarray(c) * o) for c, o in zip(cts, torch_value(case, tuple(xs)))))

    scale = 1.0 + abs(phi(list(args)))
    for i, g in zip(floats, grads):
        base = np.asarray(args[i], dtype=np.float64)
        fd = np.zeros(base.shape)
        for idx in np.ndindex(base.shape):
            vals = []
            for h in (FD_STEP, -FD_STEP):
                x = base.copy()
                x[idx] += h
                xs = list(args)
                xs[i] = x if base.ndim else float(x)
                vals.append(phi(xs))
            fd[idx] = (vals[0] - vals[1]) / (2 * FD_STEP)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8 * scale, err_msg=f"{case.id}: d/d argument {i}")


# ---- (b) compiled package vs torch ---------------------------------------------------------------

KINDS = ("value", "vjp", "vmap")
# (kernel, kind) -> reason, for an export expected to fail with a KsbuildError (strict: it must fail, so the entry
# goes when the limit is lifted or the bug fixed). In (b) such an export is built on its own so the rest still
# builds; the same entries apply to the interpreter tests (c).
KNOWN_FAILURES: dict[tuple[str, str], str] = {}


def known(case: Case, kind: str, with_kind_id: bool):
    """pytest.param(case, kind) (or pytest.param(case)) with a strict xfail mark for a known failure."""
    reason = KNOWN_FAILURES.get((case.kernel, kind))
    marks = [pytest.mark.xfail(strict=True, raises=KsbuildError, reason=reason)] if reason else []
    if with_kind_id:
        return pytest.param(case, kind, marks=marks, id=f"{kind}-{case.id}")
    return pytest.param(case, marks=marks, id=case.id)


def export_name(kernel: str, kind: str) -> str:
    return {"value": kernel, "vjp": f"{kernel}_vjp", "vmap": f"v{kernel}"}[kind]


def export_expr(kernel: str, kind: str) -> str:
    if kind == "value":
        return kernel
    if kind == "vjp":
        return f"vjp({kernel})"
    mask = next(c.mask for c in CASES if c.kernel == kernel)
    if all(mask):
        return f"vmap({kernel})"
    return f"vmap({kernel}, in_axes=({', '.join('0' if b else 'None' for b in mask)},))"


def build_package(folder: Path, exports: list[tuple[str, str]]):
    """ksbuild.build of one float64 manifest over a copy of tensor_kernels.py with these (kernel, kind) exports."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(KERNELS_FILE, folder / "tensor_kernels.py")
    lines = ["[package]", 'name = "tensor_corpus"', 'version = "0.1.0"', "", "[build]", 'dtype = "float64"', ""]
    for name in dict.fromkeys(k for k, _ in exports):
        lines += [f"[kernels.{name}]", f'python = "tensor_kernels.py:{name}"', ""]
    lines += ["[exports]"] + [f'{export_name(k, kind)} = "{export_expr(k, kind)}"' for k, kind in exports]
    (folder / "manifest.toml").write_text("\n".join(lines) + "\n")
    return ksbuild.build(folder / "manifest.toml", out=folder / "dist", optimize=DEBUG)


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    """Every kernel's three exports, minus the known failures, built once."""
    good = [(k, kind) for k in KERNEL_NAMES for kind in KINDS if (k, kind) not in KNOWN_FAILURES]
    return build_package(tmp_path_factory.mktemp("tensor_corpus_build"), good)


@pytest.mark.parametrize("case, kind", [known(c, kind, True) for c in CASES for kind in KINDS])
def test_compiled(case, kind, request, tmp_path):
    if (case.kernel, kind) in KNOWN_FAILURES:
        package = build_package(tmp_path, [(case.kernel, kind)])
    else:
        package = request.getfixturevalue("pkg")
    fn = getattr(package, export_name(case.kernel, kind))
    args = case.args(0)
    if kind == "value":
        assert_close(fn(*args), torch_value(case, args), 1e-10, f"{case.id}")
    elif kind == "vjp":
        cts = cotangents(case, args)
        assert_close(fn(*args, *cts), torch_vjp(case, args, cts), 1e-10, f"vjp {case.id}", atol=1e-11)
    else:
        pts = lanes(case)
        assert_close(fn(*stacked(case, pts)), torch_vmap(case, pts), 1e-10, f"vmap {case.id}")


# ---- (c) IR interpreter vs torch -----------------------------------------------------------------


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tensor_corpus_ir") / "tensor_kernels.py"
    shutil.copy(KERNELS_FILE, path)
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = compile_python_kernel(path, name, "f64")
        return cache[name]
    return get


@pytest.mark.parametrize("case", [known(c, "value", False) for c in CASES])
def test_interpreter_value(case, ir):
    args = case.args(0)
    assert_close(tuple(eval_func(ir(case.kernel), list(args))), torch_value(case, args), 1e-10, case.id)


@pytest.mark.parametrize("case", [known(c, "vjp", False) for c in CASES])
def test_interpreter_vjp(case, ir):
    args = case.args(0)
    cts = cotangents(case, args)
    got = eval_func(vjp_func(ir(case.kernel)), [*args, *cts])
    assert_close(tuple(got), torch_vjp(case, args, cts), 1e-10, f"vjp {case.id}", atol=1e-11)


@pytest.mark.parametrize("case", [known(c, "vmap", False) for c in CASES])
def test_interpreter_vmap(case, ir):
    f = ir(case.kernel)
    vf = vmap_func(f, case.mask, fresh_dim(f, "lanes"), [True] * len(f.results))[0]
    pts = lanes(case)
    assert_close(tuple(eval_func(vf, stacked(case, pts))), torch_vmap(case, pts), 1e-10, f"vmap {case.id}")


# ---- (d) reverse mode through a loop whose count is an int argument ---------------------------------

@pytest.fixture(scope="module")
def runtime_loop_pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime_loop")
    shutil.copyfile(KERNELS_FILE, root / "k.py")
    (root / "manifest.toml").write_text('[package]\nname = "rt"\n[build]\ndtype = "float64"\n'
                                        '[kernels]\nlv = { python = "k.py:lotka_volterra" }\n'
                                        '[exports]\nlv_vjp = "vjp(lv)"\n')
    return ksbuild.build(root / "manifest.toml", optimize=DEBUG)


@pytest.mark.parametrize("steps", [0, 1, 2, 9])
def test_vjp_through_runtime_count_loop_matches_torch(runtime_loop_pkg, steps):
    """range(steps) with steps an int argument: the reverse loop recomputes each step's state
    (quadratic time, constant workspace) and agrees with torch.autograd for every count."""
    rng = np.random.default_rng(steps)
    theta, y0 = rng.uniform(0.2, 1.0, 4), rng.uniform(0.5, 1.5, 2)
    ct_y, ct_area = rng.normal(size=2), 0.7
    t = [torch.tensor(v, requires_grad=True) for v in (theta, y0)]
    dt = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    y, area = K.lotka_volterra(t[0], t[1], dt, steps)
    loss = torch.sum(y * torch.tensor(ct_y)) + area * ct_area if steps else torch.sum(y * torch.tensor(ct_y))
    want = torch.autograd.grad(loss, [*t, dt], allow_unused=True)
    got = runtime_loop_pkg.lv_vjp(theta, y0, 0.05, steps, ct_y, ct_area)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, 0.0 if w is None else w.numpy(), rtol=1e-10, atol=1e-12)
