"""Every primitive compiled: each sample of tests/prim_samples.py, its jvp and its vjp (when it is differentiable),
built through C++ and compared with the reference interpreter; the test id names the sample (the prim).

One package per backend holds every export (one build: see the module fixture). The plain backend takes every
sample; the blas backend the samples it lowers differently (the matrix products and convolutions it hands to
ks::gemm), found by lowering each sample both ways."""
from __future__ import annotations

import re

import numpy as np
import pytest
from prim_samples import LOWERING, SAMPLES
from test_prims import _concatenation, _prims_in, differentiable, one_eqn, sample

from ksbuild.errors import KsbuildError
from ksbuild.ir.interp import eval_func
from ksbuild.ir.printer import print_func
from ksbuild.ir.verify import verify
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.pipeline import Options, lower
from ksbuild.transforms.vjp import vjp_func

NAMES = sorted(SAMPLES)
NP_DTYPES = {"f64": np.float64, "f32": np.float32, "i64": np.int64, "i32": np.int32, "u8": np.uint8, "i8": np.int8,
             "bool": np.bool_}


def export_name(name: str) -> str:
    """The sample's export (prefixed: `and`, `not` are C++ keywords)."""
    return "p_" + name.replace(":", "_")


def funcs(name: str) -> dict:
    """export name -> IR function: the sample, and its jvp and vjp when it is differentiable."""
    f = one_eqn(name)
    out = {export_name(name): f}
    if differentiable(name):
        out[export_name(name) + "_jvp"] = jvp_func(f)
        out[export_name(name) + "_vjp"] = vjp_func(f)
    return out


def taken_by(backend: str, name: str) -> bool:
    """Whether `backend` lowers some function of the sample otherwise than the plain backend does (True when the
    sample cannot be built or lowered: its tests then fail naming it, not the collection)."""
    try:
        return any(print_func(lower(f, Options(backend=backend))) != print_func(lower(f)) for f in funcs(name).values())
    except Exception:  # noqa: BLE001
        return True


def lowered(f, backend: str):
    """f through the pipeline, verified after it (a malformed result names its equation and prim)."""
    g = lower(f, Options(backend=backend))
    verify(g)
    return g


LOWERED_PRIMS: dict[str, dict[str, set]] = {}
"""backend -> export -> the prims of its lowered function (bodies' too), filled as the package is built (an export
whose C++ did not compile included)."""


def build(tmp_path_factory, backend: str, names: list[str], extra: dict | None = None):
    """One package with every function of the samples `names` and the `extra` exports (export name -> function)
    (rendered from the IR directly, built, loaded): (package, {export: IR function}, {sample or extra export: the
    compiler's errors in its functions}). When the C++ does not compile, the samples with a function the compiler
    rejects are left out and the rest is built again: their tests fail with the compiler's messages, the others
    still run."""
    d = tmp_path_factory.mktemp(f"prims_{backend}")
    fs, owned = dict(extra or {}), {e: e for e in extra or {}}  # export -> function, export -> its sample
    for n in names:
        for e, f in funcs(n).items():
            fs[e], owned[e] = f, n
    try:
        return _build(d / "first", backend, fs), fs, {}
    except KsbuildError:
        errors = compile_errors(d / "first", backend)
        broken: dict[str, str] = {}
        for e, n in owned.items():
            if e in errors:
                broken[n] = broken.get(n, "") + f"in {e}:\n{errors[e]}"
        if not broken:
            raise
    fs = {e: f for e, f in fs.items() if owned[e] not in broken}
    return _build(d / "again", backend, fs), fs, broken


def compile_errors(d, backend: str) -> dict[str, str]:
    """export -> the compiler's errors on lines of its function in the generated source (each error line, then the
    source line it points at)."""
    source = (d / "project" / "src" / f"prims_{backend}.cpp").read_text().splitlines()
    starts = [(i + 1, m.group(1)) for i, line in enumerate(source)
              if (m := re.match(rf"\S.* prims_{backend}_(p_\w+)\(.*\{{$", line))]
    out: dict[str, str] = {}
    for m in re.finditer(rf"prims_{backend}\.cpp:(\d+):\d+: error: .*", (d / "build.log").read_text(errors="replace")):
        line = int(m.group(1))
        owner = next((e for start, e in reversed(starts) if start <= line), None)
        if owner is not None:
            out[owner] = out.get(owner, "") + f"{m.group(0)}\n    {source[line - 1].strip()}\n"
    return out


def _build(d, backend: str, fs: dict):
    from ksbuild.compile.cmake import build_and_install
    from ksbuild.compile.targets import TARGETS
    from ksbuild.exports import Export
    from ksbuild.manifest import load_manifest
    from ksbuild.packaging.cache import file_lock, kernels_lock
    from ksbuild.packaging.package import for_here, kernel_cache
    from ksbuild.packaging.render import render_project
    from ksbuild.packaging.runtime import Package
    d.mkdir()
    (d / "k.py").write_text("def k(x: float) -> float:\n    return x\n")
    (d / "manifest.toml").write_text(f'[package]\nname = "prims_{backend}"\n\n[build]\nbackend = "{backend}"\n'
                                     'optimize = "debug"\n\n'  # (conftest.DEBUG: values; the C++ form is the same)
                                     '[kernels.k]\npython = "k.py:k"\n\n[exports]\nk = "k"\n')
    m = for_here(load_manifest(d / "manifest.toml"), TARGETS["host"])  # (this machine's level: one compile)
    spec, kernel = next(iter(m.exports.values())), m.kernels["k"]
    exports = [Export(e, lowered(f.renamed(e), backend), spec, kernel) for e, f in fs.items()]
    LOWERED_PRIMS.setdefault(backend, {}).update((x.name, _prims_in(x.func)) for x in exports)  # (first build's too)
    render_project(m, exports, d / "project")
    kernels = kernel_cache(m, TARGETS["host"])  # (the kernel layer's objects, compiled once per cache)
    with file_lock(kernels_lock(kernels), shared=True):
        build_and_install(d / "project", d / "build", d / "install", log=d / "build.log", python_module=True,
                          progress=lambda s: None, kernel_cache=kernels)
    return Package(d / "install")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return build(tmp_path_factory, "plain", NAMES, {"p_concatenation": _concatenation()})  # (join's: no sample)


BLAS_NAMES = [n for n in NAMES if taken_by("blas", n)]


@pytest.fixture(scope="module")
def blas(tmp_path_factory):
    return build(tmp_path_factory, "blas", BLAS_NAMES)


def _close(got, want, what: str):
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12, err_msg=what)


def check(package, name: str) -> None:
    """The compiled sample (and its jvp and vjp) against the interpreter on the sample's inputs."""
    pkg, fs, broken = package
    if name in broken:
        own = ", ".join(n for n in broken if "in " + export_name(n) + ":" in broken[n]) or "none"
        pytest.fail(f"the C++ of sample {name} does not compile (samples whose own function fails: {own}):\n"
                    f"{broken[name]}")
    rng = np.random.default_rng(7)
    f = fs[export_name(name)]
    args = [np.asarray(a, dtype=NP_DTYPES[p.type.dtype]) for a, p in zip(sample(name, rng), f.params)]
    e = export_name(name)
    _close(getattr(pkg, e)(*args), eval_func(f, args), e)
    if e + "_jvp" in fs:
        dirs = [rng.standard_normal(np.shape(a)) for a, p in zip(args, f.params) if p.type.is_float]
        _close(getattr(pkg, e + "_jvp")(*args, *dirs), eval_func(fs[e + "_jvp"], args + dirs), e + "_jvp")
        u = [rng.standard_normal(np.shape(np.asarray(o))) for o in eval_func(f, args)]
        _close(getattr(pkg, e + "_vjp")(*args, *u), eval_func(fs[e + "_vjp"], args + u), e + "_vjp")


@pytest.mark.parametrize("name", NAMES)
def test_plain(plain, name):
    check(plain, name)


@pytest.mark.parametrize("name", BLAS_NAMES)
def test_blas(blas, name):
    check(blas, name)


def test_blas_takes_the_products():
    """The blas package is no copy of the plain one: it holds the matrix products (else test_blas tests nothing)."""
    assert "einsum:matmul" in BLAS_NAMES or any(n.startswith("einsum") for n in BLAS_NAMES), BLAS_NAMES


@pytest.mark.parametrize("name", sorted(LOWERING))
def test_plain_lowering_prim(plain, name):
    """A prim only the passes make (contract, convolve, fusion, join, qpack, winograd_kernel) has no sample of its own:
    the exports of the plain package whose lowered functions hold it (einsum:matmul's contract, conv's convolve, the
    concatenation's join) compiled and give the interpreter's values, so a broken emit rule of such a prim fails a
    test named after it."""
    pkg, fs, broken = plain
    held = sorted(e for e, prims in LOWERED_PRIMS["plain"].items() if name in prims)
    assert held, f"no export of the plain package lowers to {name}"
    samples = {export_name(n): n for n in NAMES}
    for e in held[:6]:  # (each holds the prim's C++; a few suffice: fusion is in most exports)
        base = re.sub(r"_(jvp|vjp)$", "", e)
        if base in samples:
            check(plain, samples[base])
        elif e in broken:
            pytest.fail(f"the C++ of {e} does not compile:\n{broken[e]}")
        else:
            rng = np.random.default_rng(7)
            args = [rng.standard_normal(tuple(p.type.shape)) for p in fs[e].params]
            _close(getattr(pkg, e)(*args), eval_func(fs[e], args), e)
