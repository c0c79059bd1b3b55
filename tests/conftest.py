"""Shared fixtures: one build cache for the whole session, the repository root on sys.path."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


# Files that take the longest (builds of wheels and venvs, many C++ programs, cross builds under qemu, torch.export
# and ONNX exports of transformers) run first, then the others by their number of tests, most first. `-n auto
# --dist loadfile` hands whole files to the workers in that order: by default pytest-xdist orders them by their
# number of tests alone (--loadscope-reorder), which put the long files of few tests (test_prelude_cpp.py: 1 test,
# 8 C++ programs; test_wheel.py: 8 tests, a wheel of three instruction set levels and a venv) last, keeping one
# worker busy while the other had nothing left. Only the order changes, never what runs.
LONG_FILES = ("test_kernel_layer.py", "test_targets.py", "test_onnx_examples.py", "test_torch_op_registry.py",
              "test_frontend_robustness.py", "test_reroll.py", "test_torch_dev_loop.py", "test_torch_export.py",
              "test_aten_backend.py", "test_clang.py", "test_prelude_cpp_tiles.py", "test_prelude_cpp.py",
              "test_prims_compiled.py", "test_qconv_sanitized.py", "test_int8_levels.py",
              "test_torch_export_vs_onnx.py", "test_cortex_m4_bench.py", "test_subproject.py", "test_threads.py",
              "test_install_wheel.py",
              "test_qtile_aarch64.py", "test_gradbench.py", "test_ort_backend.py",
              "test_torch_export_transformers.py", "test_cache.py", "test_jacobians.py", "test_passes.py",
              "test_onnx_models.py", "test_calls.py", "test_fuzz_regressions.py", "test_conv.py",
              "test_generated_frames.py", "test_memory_arena.py", "test_onnx_conformance.py", "test_torch_values.py",
              "test_torch_hop.py", "test_cache_entries.py", "test_torch_frontend.py", "test_compositions.py",
              "test_fuzz.py", "test_tensor_corpus.py", "test_wheel.py", "test_cli.py", "test_golden.py",
              "test_kernel_layer_m4.py", "test_qtile_m4.py", "test_numerics.py", "test_dispatch.py",
              "test_baremetal_link.py", "test_compiler_launcher.py", "test_affine_epilogue.py")
# (by CPU seconds in the fresh-clone run of 40194e0, most first: every file of 15 s or more; KSBUILD_TEST_CPU_LOG
# and scripts/test_cpu.py, 2026-12-01: test_qconv_sanitized, one test of 45 s new in that run and not in the list,
# ran last of all, after the short files; then the files of the older list below 15 s; but test_targets, whose cross builds take no host kernel objects, starts on
# the second worker beside test_kernel_layer, so that test_onnx_examples does not wait on the lock of the host
# level's kernel objects test_kernel_layer is compiling. The files after them take 0-15 s each, so the run ends on
# short files whatever their order. test_dispatch and test_wheel take the portable kernel layer test_onnx_examples
# compiles, far enough behind it not to wait on its lock. Until 2026-12-01 the list was an older run's costliest
# files and left files of 25-30 s (test_passes, test_cli, test_jacobians, test_torch_hop) to the order by number of
# tests. test_int8_levels, new on 2026-12-01 (one test, 80 s at load 5: a portable int8 build at every level), is
# placed beside test_qconv_sanitized by hand.)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # (pytest-xdist: keep the order of the collection, below)
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    from collections import Counter
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    tests = Counter(item.path for item in items)
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -tests[item.path] if item.path.name not in rank
                                 else 0, order[id(item)]))


def _cpu_seconds() -> tuple[float, float]:
    """(this process's CPU seconds, its finished children's: compilers, CMake, qemu, ctest)."""
    import resource
    return tuple(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                   resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With KSBUILD_TEST_CPU_LOG=file, append each test's CPU seconds (its worker's and the finished children's:
    compilers, qemu, ctest; fixtures count with the first test that sets them up), its id, and the two parts (the
    worker's own Python, the children's) to that file. Unlike --durations, this does not grow with the machine's
    load; scripts/test_cpu.py sums it by file."""
    log = os.environ.get("KSBUILD_TEST_CPU_LOG")
    start = _cpu_seconds() if log else (0.0, 0.0)
    yield
    if log:
        own, children = (b - a for a, b in zip(start, _cpu_seconds()))
        with open(log, "a") as f:
            f.write(f"{own + children:.2f}\t{item.nodeid}\t{own:.2f}\t{children:.2f}\n")


def base_folder(tmp_path_factory) -> Path:
    """The run's temporary folder, shared by the pytest-xdist workers (above each worker's own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _bytecode_for_children(folder: Path) -> None:
    """The Python processes the tests start (`python -m ksbuild ...`: 20 at once in test_cache, the CLI tests, fresh
    processes loading saved programs) write and read their bytecode in `folder` (PYTHONPYCACHEPREFIX), shared by
    the run, when the environment says not to write it (PYTHONDONTWRITEBYTECODE=1, as on the machine of the
    fresh-clone runs): else each one compiles ksbuild's ~200 modules again, 0.5 s of CPU a process. Nothing is written
    into the sources or the venv; the run's folder is thrown away with it."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and "PYTHONPYCACHEPREFIX" not in os.environ:
        folder.mkdir(exist_ok=True)
        os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
        del os.environ["PYTHONDONTWRITEBYTECODE"]


@pytest.fixture(scope="session", autouse=True)
def _cache(tmp_path_factory):
    """Builds share one cache per session unless KSBUILD_CACHE is set by the caller. Under pytest-xdist
    (`-n 2`) the workers share it too: the cache's per-key locks let one worker build a package while
    another waits and reuses it."""
    if "KSBUILD_CACHE" not in os.environ:
        cache = base_folder(tmp_path_factory) / "ksbuild-cache"
        cache.mkdir(exist_ok=True)
        os.environ["KSBUILD_CACHE"] = str(cache)
        # (the session's cache is thrown away after the run: no size limit, so that what one test built stays there
        # for the next; tests/test_cache_entries.py checks the limit)
        os.environ.setdefault("KSBUILD_CACHE_MAX_SIZE", "0")
    _bytecode_for_children(base_folder(tmp_path_factory) / "pycache")
    # Packages are built for this machine's CPU alone, as ksbuild.build builds them (one compile instead of one per
    # x86-64 level); a test of the portable build sets KSBUILD_HERE=0 (test_onnx_examples' `installed`) or asks
    # for it (ksbuild.build(..., portable=True): test_dispatch).
    os.environ.setdefault("KSBUILD_HERE", "1")
    yield


@pytest.fixture(autouse=True)
def _same_random_state():
    """Every test starts from one global random state (Python's, numpy's, and torch's once imported) whatever ran
    before it in its worker: under pytest-xdist (--dist loadfile) which files share a worker, and in what order,
    changes from run to run, so a test drawing torch.randn or np.random without a seed of its own would otherwise
    see other inputs in every run."""
    import random

    import numpy as np
    random.seed(0)
    np.random.seed(0)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(0)
    yield


# optimize="debug" for the session's largest packages whose tests check values (ksbuild.build(..., optimize=DEBUG),
# build_kernel_file(..., optimize=DEBUG)): their own code at -Og, 3-7 times quicker to compile than at -O3; the
# kernel layer is the speed build's. Everything a user ships is still built at speed: the examples, the wheels,
# the networks' code, stack and frame tests, the fuzzers (C++ warnings), the golden files, the kernel layer.
DEBUG = "debug"


@pytest.fixture(scope="session")
def relu3_pkg():
    import ksbuild

    return ksbuild.build(ROOT / "examples/relu3/manifest.toml")


def build_kernel_file(root: Path, kernels: str, manifest: str, module: str, optimize: str | None = None):
    """(package, the kernel file imported as a Python module): k.py and manifest.toml written into root
    and built, so a test compares the compiled exports with the same source run by torch. optimize="debug" (DEBUG):
    see below."""
    import importlib.util

    import ksbuild

    (root / "k.py").write_text(kernels)
    (root / "manifest.toml").write_text(manifest)
    spec = importlib.util.spec_from_file_location(module, root / "k.py")
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    return ksbuild.build(root / "manifest.toml", optimize=optimize), source


def undefined_symbols(lib: Path, nm: str = "nm") -> set[str]:
    """The symbols a static library leaves for the linker (`nm -u`)."""
    import subprocess
    out = subprocess.run([nm, "-u", str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip() and not line.endswith(":")}


def build_and_run_app(app: Path, prefix: Path, build: Path, exe: str):
    """An example's consumer app configured against an installed package (CMAKE_PREFIX_PATH), built, run."""
    import subprocess

    from ksbuild.compile.cmake import cmake_exe
    cmake = cmake_exe()
    subprocess.run([cmake, "-S", str(app), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}"], check=True,
                   capture_output=True)
    subprocess.run([cmake, "--build", str(build)], check=True, capture_output=True)
    return subprocess.run([str(build / exe)], capture_output=True, text=True)


def captures_once(models_file: Path):
    """A generator for a module fixture: while it is suspended, torch.export's capture of each make function of
    `models_file` is made once (ksbuild.frontends.torch_export.capture.capture patched; other files captured as
    usual) and shared by the IR tests and the packages' builds (ksbuild.build, in this process) of the module:
    torch.export and run_decompositions are most of their time, the importer, the pipeline and the compile still
    run for each. Yields the captures made, by (file, make)."""
    import importlib
    module = importlib.import_module("ksbuild.frontends.torch_export.capture")
    real, done = module.capture, {}

    def once(source, root, make, loc):
        key = ((Path(root) / source).resolve(), make)
        if key[0] != models_file.resolve():
            return real(source, root, make, loc)
        if key not in done:
            done[key] = real(source, root, make, loc)
        return done[key]
    module.capture = once
    try:
        yield done
    finally:
        module.capture = real
