"""A corpus of kernels in the supported Python subset, each checked end to end against oracles.

Every kernel is written with `torch.*` functions so that the very same Python function also runs
on 0-d float64 torch tensors. For each kernel (float = f64):
  (a) the reference interpreter equals the Python function, at random points and on branch edges;
  (b) jvp equals central finite differences (away from kinks);
  (c) vjp passes the dot-product test against jvp: <u, J v> == <J^T u, v>;
  (d) vjp and grad equal torch.autograd on the same Python function;
  (e) vmap equals a loop of the scalar kernel;
  (f) the compiled C++ (ksbuild.build, one manifest for the whole corpus) equals the interpreter
      for the kernel, its vmap and its vjp.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

import ksbuild
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.vjp import grad_func, vjp_func
from ksbuild.transforms.vmap import vmap_func

SOURCE = '''\
"""The kernel corpus: every function runs in ksbuild and, on 0-d tensors, in torch."""
import torch

ALPHA = 1.5
BETA = ALPHA * 2.0 - 0.25
THRESHOLD = 20.0


def softplus(x: float) -> float:
    if x > THRESHOLD:
        return x
    return torch.log1p(torch.exp(x))


def smoothstep(x: float) -> float:
    if x <= 0.0:
        return 0.0
    elif x < 0.5:
        return 2.0 * x * x
    elif x < 1.0:
        return 1.0 - 2.0 * (1.0 - x) ** 2
    else:
        return 1.0


def horner(x: float) -> float:
    acc = 0.0
    for k in range(6):
        acc = acc * x + 1.0 / float(k + 1)
    return acc


def newton_sqrt(a: float) -> float:
    y = 0.5 * (1.0 + a)
    for i in range(6):
        y = 0.5 * (y + a / y)
    return y


def swap_pair(x: float, y: float) -> tuple[float, float]:
    a, b = x, y
    for i in range(4):
        if a > b:
            a, b = b, 0.5 * a + b
        else:
            a = a + 0.25 * b
    return a, b


def geometric(x: float, n: int) -> float:
    s = 0.0
    p = 1.0
    for i in range(n):
        p = p * x
        s = s + p / float(i + 1)
    return s


def _sq(t: float) -> float:
    return t * t


def _polar(x: float, y: float) -> tuple[float, float]:
    return torch.sqrt(_sq(x) + _sq(y)), torch.atan2(y, x)


def polar_mix(x: float, y: float) -> tuple[float, float]:
    r, theta = _polar(x, y)
    return r * torch.cos(theta), r * torch.sin(2.0 * theta)


def leaky(x: float, a: float) -> float:
    return x if x > 0.0 else a * x


def window(x: float) -> float:
    return torch.sin(x) if -1.0 < x <= 2.0 else 0.5 * x


def quantize(x: float, n: int) -> float:
    k = int(x * 4.0)
    return float(k) * 0.25 + torch.sin(x) * float(n)


def powmix(x: float) -> float:
    return ALPHA * x ** 2.5 + BETA * torch.sqrt(x) - x ** -2


def clipmix(x: float, y: float, z: float) -> float:
    return max(x, y, z) - min(x, y, 0.5) + abs(x - z)


def nested(x: float, y: float) -> float:
    if x > 0.0:
        if y > 0.0:
            return x * y
        t = x - y
        if t > 2.0:
            return torch.sqrt(t)
    elif y < -1.0:
        return torch.exp(y) * x
    return x + 2.0 * y


def accumulate(x: float, y: float) -> float:
    s = x + 0.0
    s += 2.0 * y
    s *= x
    s -= 1.0
    s /= 1.0 + y * y
    s **= 2
    return s


def odd_harmonics(x: float) -> float:
    s = 0.0
    for i in range(1, 8, 2):
        s += torch.sin(float(i) * x) / float(i)
    return s


def int_arith(x: float, n: int) -> float:
    return x * float(n // 3) + float(n % 3) * torch.cos(x) + (n - 2) * x


def gate(x: float, y: float) -> float:
    g = torch.sigmoid(x)
    return torch.where(y > 0.0, g * y, torch.tanh(y) * (1.0 - g))


def logic(x: float, y: float) -> float:
    if (x > 0.0 and y > 0.0) or not x > -1.0:
        return x * y
    return x - y
'''

PY = {}  # the same functions, run by Python on torch tensors (its own compile flags, not this module's)
exec(compile(SOURCE, "corpus_kernels.py", "exec", dont_inherit=True), PY)


# ---- the table -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Real:
    lo: float
    hi: float


@dataclass(frozen=True)
class Int:
    lo: int
    hi: int


def _no_kinks(*args):
    return ()


@dataclass(frozen=True)
class Kernel:
    name: str
    args: tuple  # Real or Int per parameter: where random points are drawn
    edges: tuple = ()  # points on branch boundaries (value checks only)
    kinks: Callable = _no_kinks  # quantities that vanish where the kernel is not smooth
    batched: tuple | None = None  # vmap in_axes as a mask; default: every argument batched
    reverse: bool = True  # False: leave the kernel out of the reverse-mode tests (no kernel needs it today)

    def __str__(self) -> str:
        return self.name

    @property
    def mask(self) -> list[bool]:
        return list(self.batched) if self.batched is not None else [True] * len(self.args)

    @property
    def floats(self) -> list[bool]:
        return [isinstance(a, Real) for a in self.args]


def _swap_pair_gaps(x, y):
    a, b, gaps = x, y, []
    for _ in range(4):
        gaps.append(a - b)
        a, b = (b, 0.5 * a + b) if a > b else (a + 0.25 * b, b)
    return gaps


def _quarter_gap(x, n):
    return (4 * x - round(4 * x),)


R2 = (Real(-2.0, 2.0), Real(-2.0, 2.0))

KERNELS = [
    Kernel("softplus", (Real(-30.0, 40.0),), ((20.0,), (0.0,), (-30.0,), (800.0,)), lambda x: (x - 20.0,)),
    Kernel("smoothstep", (Real(-0.5, 1.5),), ((0.0,), (0.5,), (1.0,), (-0.0,)), lambda x: (x, x - 0.5, x - 1.0)),
    Kernel("horner", (Real(-2.0, 2.0),), ((0.0,), (1.0,))),
    Kernel("newton_sqrt", (Real(0.1, 5.0),), ((1.0,), (4.0,))),
    Kernel("swap_pair", R2, ((1.0, 1.0), (0.0, 0.0), (1.0, 0.5)), _swap_pair_gaps),
    Kernel("geometric", (Real(-1.5, 1.5), Int(0, 6)), ((0.5, 0), (0.5, -2), (2.0, 5)),
           batched=(True, False)),
    Kernel("polar_mix", R2, ((-1.0, 0.0), (1.0, 0.0), (0.0, 1.0)), lambda x, y: (np.hypot(x, y),)),
    Kernel("leaky", (Real(-2.0, 2.0), Real(0.0, 1.0)), ((0.0, 0.3), (-1.0, 0.0)), lambda x, a: (x,)),
    Kernel("window", (Real(-3.0, 4.0),), ((-1.0,), (2.0,)), lambda x: (x + 1.0, x - 2.0)),
    Kernel("quantize", (Real(-2.0, 2.0), Int(-3, 3)), ((0.25, 2), (-0.25, 3), (0.0, 0), (-0.9, 1)), _quarter_gap),
    Kernel("powmix", (Real(0.2, 3.0),), ((1.0,), (0.2,))),
    Kernel("clipmix", (Real(-1.0, 2.0),) * 3, ((0.5, 0.5, 0.5), (1.0, 1.0, 0.0), (0.2, 0.7, 0.7)),
           lambda x, y, z: (x - y, y - z, x - z, x - 0.5, y - 0.5)),
    Kernel("nested", (Real(-3.0, 3.0),) * 2, ((0.0, 0.0), (1.0, 0.0), (2.0, 0.0), (0.0, -1.0), (-1.0, -1.0)),
           lambda x, y: (x, y, x - y - 2.0, y + 1.0)),
    Kernel("accumulate", R2, ((0.0, 0.0), (1.0, -1.0))),
    Kernel("odd_harmonics", (Real(-3.0, 3.0),), ((0.0,),)),
    Kernel("int_arith", (Real(-2.0, 2.0), Int(-7, 7)), ((1.0, -5), (0.5, -1), (2.0, 0), (1.0, 3))),
    Kernel("gate", (Real(-3.0, 3.0),) * 2, ((1.0, 0.0), (0.0, -0.0)), lambda x, y: (y,)),
    Kernel("logic", R2, ((0.0, 1.0), (1.0, 0.0), (-1.0, 2.0), (0.5, 0.5)), lambda x, y: (x, y, x + 1.0)),
]
REVERSIBLE = [k for k in KERNELS if k.reverse]
SCALAR_RESULT = [k for k in REVERSIBLE if PY[k.name].__annotations__["return"] is float]  # where grad applies

N_RANDOM = 10
H = 1e-6  # finite-difference step
MARGIN = 1e-3  # derivative checks keep this far from kinks


# ---- helpers ---------------------------------------------------------------------------------------


def rng_for(k: Kernel, salt: str = "") -> np.random.Generator:
    return np.random.default_rng(zlib.crc32((k.name + salt).encode()))


def random_points(k: Kernel, n: int = N_RANDOM) -> list[tuple]:
    rng = rng_for(k)
    cols = [rng.uniform(a.lo, a.hi, n) if isinstance(a, Real) else rng.integers(a.lo, a.hi + 1, n) for a in k.args]
    return [tuple(c[i].item() for c in cols) for i in range(n)]


def value_points(k: Kernel) -> list[tuple]:
    return list(k.edges) + random_points(k)


def smooth_points(k: Kernel) -> list[tuple]:
    pts = [p for p in random_points(k, 3 * N_RANDOM) if all(abs(q) > MARGIN for q in k.kinks(*p))][:N_RANDOM]
    assert len(pts) >= 5, f"too few smooth points for {k.name}"
    return pts


@pytest.fixture(scope="module")
def source_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus_kernels.py"
    path.write_text(SOURCE)
    return path


@pytest.fixture(scope="module")
def ir(source_file):
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = compile_python_kernel(source_file, name, "f64")
        return cache[name]
    return get


def run(f, args) -> list[np.ndarray]:
    return [np.asarray(r) for r in eval_func(f, list(args))]


def run_python(k: Kernel, point: tuple) -> list[float]:
    """The kernel's own Python function on 0-d float64 tensors (ints stay Python ints)."""
    args = [torch.tensor(v, dtype=torch.float64) if f else v for v, f in zip(point, k.floats)]
    out = PY[k.name](*args)
    return [float(o) for o in (out if isinstance(out, tuple) else (out,))]


def torch_vjp(k: Kernel, point: tuple, cts: list[float]) -> list[float]:
    """torch.autograd's cotangents of the float parameters for the given output cotangents."""
    leaves = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v, f in zip(point, k.floats) if f]
    it = iter(leaves)
    out = PY[k.name](*[next(it) if f else v for v, f in zip(point, k.floats)])
    outs = out if isinstance(out, tuple) else (out,)
    live = [(o, c) for o, c in zip(outs, cts) if torch.is_tensor(o) and o.requires_grad]
    if not live:  # a branch returning a constant
        return [0.0] * len(leaves)
    grads = torch.autograd.grad([o for o, _ in live], leaves, [torch.tensor(c, dtype=torch.float64) for _, c in live],
                                allow_unused=True)
    return [0.0 if g is None else g.item() for g in grads]


def shifted(k: Kernel, point: tuple, v: np.ndarray, h: float) -> tuple:
    it = iter(v)
    return tuple(p + h * next(it) if f else p for p, f in zip(point, k.floats))


def random_tangent(k: Kernel, salt: str) -> np.ndarray:
    return rng_for(k, salt).standard_normal(sum(k.floats))


def jvp_at(jf, point: tuple, v: np.ndarray, n_out: int) -> tuple[list, list]:
    """(primal results, tangents of the results) of the jvp function jf."""
    outs = run(jf, [*point, *v])
    return outs[:n_out], outs[n_out:]


def lanes(k: Kernel, points: list[tuple]) -> list[tuple]:
    """The points, with every unbatched argument fixed to its value in the first point."""
    return [tuple(v if b else points[0][i] for i, (v, b) in enumerate(zip(p, k.mask))) for p in points]


def stack(k: Kernel, pts: list[tuple]) -> list:
    return [np.array([p[i] for p in pts]) if b else pts[0][i] for i, b in enumerate(k.mask)]


def vmapped(f, k: Kernel):
    return vmap_func(f, k.mask, "n", [True] * len(f.results))[0]


ids = pytest.mark.parametrize("k", KERNELS, ids=str)
ids_reverse = pytest.mark.parametrize("k", REVERSIBLE, ids=str)


# ---- (a) interpreter vs Python ------------------------------------------------------------------


@ids
def test_interpreter_matches_python(k, ir):
    f = ir(k.name)
    for p in value_points(k):
        np.testing.assert_allclose(np.array(run(f, p), dtype=float), run_python(k, p), rtol=1e-12, atol=1e-14,
                                   err_msg=f"{k.name}{p}")


# ---- (b) jvp vs finite differences ----------------------------------------------------------------


@ids
def test_jvp_matches_finite_differences(k, ir):
    f = ir(k.name)
    jf = jvp_func(f)
    n_out = len(f.results)
    for j, p in enumerate(smooth_points(k)):
        v = random_tangent(k, f"v{j}")
        primal, tangent = jvp_at(jf, p, v, n_out)
        np.testing.assert_allclose(np.array(primal, dtype=float), np.array(run(f, p), dtype=float), rtol=1e-14)
        up, down = run(f, shifted(k, p, v, H)), run(f, shifted(k, p, v, -H))
        fd = [(a - b) / (2 * H) for a, b in zip(up, down)]
        np.testing.assert_allclose(np.array(tangent, dtype=float), fd, rtol=1e-6, atol=1e-6, err_msg=f"{k.name}{p}")


# ---- (c) vjp: dot-product test against jvp ------------------------------------------------------


@ids_reverse
def test_vjp_dot_product(k, ir):
    f = ir(k.name)
    jf, vf = jvp_func(f), vjp_func(f)
    n_out = len(f.results)
    for j, p in enumerate(smooth_points(k)):
        v, u = random_tangent(k, f"v{j}"), rng_for(k, f"u{j}").standard_normal(n_out)
        _, jv = jvp_at(jf, p, v, n_out)
        jtu = np.array(run(vf, [*p, *u]), dtype=float)
        lhs, rhs = float(np.dot(u, np.array(jv, dtype=float))), float(np.dot(jtu, v))
        scale = float(np.sum(np.abs(u * np.array(jv, dtype=float))) + np.sum(np.abs(jtu * v)))
        assert abs(lhs - rhs) <= 1e-12 * scale + 1e-300, (k.name, p, lhs, rhs)


# ---- (d) vjp and grad vs torch.autograd --------------------------------------------------------


@ids_reverse
def test_vjp_matches_torch_autograd(k, ir):
    f = ir(k.name)
    vf = vjp_func(f)
    for j, p in enumerate(smooth_points(k)):
        u = rng_for(k, f"u{j}").standard_normal(len(f.results))
        got = np.array(run(vf, [*p, *u]), dtype=float)
        np.testing.assert_allclose(got, torch_vjp(k, p, list(u)), rtol=1e-12, atol=1e-14, err_msg=f"{k.name}{p}")


@pytest.mark.parametrize("k", SCALAR_RESULT, ids=str)
def test_grad_matches_torch_autograd(k, ir):
    gf = grad_func(ir(k.name))
    for p in smooth_points(k):
        got = np.array(run(gf, p), dtype=float)
        np.testing.assert_allclose(got, torch_vjp(k, p, [1.0]), rtol=1e-12, atol=1e-14, err_msg=f"{k.name}{p}")


# ---- (e) vmap vs a loop -----------------------------------------------------------------------------


@ids
def test_vmap_matches_loop(k, ir):
    f = ir(k.name)
    pts = lanes(k, value_points(k))
    got = run(vmapped(f, k), stack(k, pts))
    want = np.array([run(f, p) for p in pts], dtype=float).T  # (results, lanes)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-300, err_msg=k.name)


# ---- (f) compiled C++ vs interpreter --------------------------------------------------------------

# (kernel, kind) -> reason, for a C++ case expected to fail (open bugs, see the issue notes)
KNOWN_CPP_BUGS = {}
CPP_CASES = [(k, kind) for k in KERNELS for kind in ("kernel", "vmap", "vjp") if kind != "vjp" or k.reverse]


def export_name(k: Kernel, kind: str) -> str:
    return {"kernel": k.name, "vmap": f"v{k.name}", "vjp": f"{k.name}_vjp"}[kind]


def export_expr(k: Kernel, kind: str) -> str:
    if kind == "kernel":
        return k.name
    if kind == "vjp":
        return f"vjp({k.name})"
    if all(k.mask):
        return f"vmap({k.name})"
    return f"vmap({k.name}, in_axes=({', '.join('0' if b else 'None' for b in k.mask)},))"


def build_package(folder: Path, cases: list[tuple[Kernel, str]]):
    """ksbuild.build of one manifest exporting these (kernel, kind) cases of the corpus file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus_kernels.py").write_text(SOURCE)
    lines = ["[package]", 'name = "corpus"', 'version = "0.1.0"', "", "[build]", 'dtype = "float64"', ""]
    for name in dict.fromkeys(k.name for k, _ in cases):
        lines += [f"[kernels.{name}]", f'python = "corpus_kernels.py:{name}"', ""]
    lines += ["[exports]"] + [f'{export_name(k, kind)} = "{export_expr(k, kind)}"' for k, kind in cases]
    (folder / "manifest.toml").write_text("\n".join(lines) + "\n")
    return ksbuild.build(folder / "manifest.toml", out=folder / "dist")


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    """The whole corpus minus the known-bad exports, built once."""
    good = [c for c in CPP_CASES if (c[0].name, c[1]) not in KNOWN_CPP_BUGS]
    return build_package(tmp_path_factory.mktemp("corpus_build"), good)


def as_list(x) -> list:
    return list(x) if isinstance(x, tuple) else [x]


def check_cpp(k: Kernel, kind: str, fn, f) -> None:
    """The compiled export fn against the interpreter on f (the kernel's IR)."""
    if kind == "vmap":
        args = stack(k, lanes(k, value_points(k)))
        for g, w in zip(as_list(fn(*args)), run(vmapped(f, k), args)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14, err_msg=k.name)
        return
    vf = vjp_func(f) if kind == "vjp" else f
    for j, p in enumerate(value_points(k)):
        u = rng_for(k, f"u{j}").standard_normal(len(f.results)).tolist() if kind == "vjp" else []
        np.testing.assert_allclose(as_list(fn(*p, *u)), np.array(run(vf, [*p, *u]), dtype=float), rtol=1e-12,
                                   atol=1e-14, err_msg=f"{kind} {k.name}{p}")


def cpp_param(k: Kernel, kind: str):
    bug = KNOWN_CPP_BUGS.get((k.name, kind))
    marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
    return pytest.param(k, kind, marks=marks, id=f"{kind}-{k.name}")


@pytest.mark.parametrize("k, kind", [cpp_param(k, kind) for k, kind in CPP_CASES])
def test_cpp_matches_interpreter(k, kind, ir, request, tmp_path):
    if (k.name, kind) in KNOWN_CPP_BUGS:  # build it on its own so the rest of the corpus still builds
        package = build_package(tmp_path, [(k, kind)])
    else:
        package = request.getfixturevalue("pkg")
    check_cpp(k, kind, getattr(package, export_name(k, kind)), ir(k.name))
