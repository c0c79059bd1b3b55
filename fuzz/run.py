"""The fuzzer's driver: generate kernels in batches, export each through many nestings, and check the
reference interpreter against torch and the compiled package against the interpreter.

Each kernel k of a run with seed S is made from numpy's generator seeded (S, k) alone, so `--seed S
--only k` makes it again. A failure prints its seed and kernel and writes the kernel, a manifest with the
failing export and the inputs to a folder (see write_case).
"""
from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import nesting, torch_shim
from .known import explained
from .scalars import scalar_kernel
from .tensors import tensor_kernel

HEADER = "import math\n\nimport torch\nimport torch.nn.functional as F\n\n\n"
EXTRA_NESTINGS = 5  # random nestings per kernel, besides the core ones
POINTS = 3  # inputs per export


@dataclass
class Case:
    """One generated kernel and its exports: C name -> nesting."""

    seed: int
    index: int
    kernel: object
    exports: dict[str, tuple]
    lanes: dict = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return f"seed {self.seed} kernel {self.index}"


@dataclass
class Failure:
    case: Case
    export: str
    stage: str  # frontend, transform, interpreter, oracle-vs-interpreter, build, compiled, compiled-vs-interpreter
    message: str
    inputs: list | None = None


@dataclass
class Report:
    kernels: int = 0
    exports: int = 0
    checks: int = 0  # (export, input) pairs compared
    torch_nan: int = 0  # results where the oracle itself was nan (not compared)
    failures: list[Failure] = field(default_factory=list)  # new: no known defect explains them
    known: list[Failure] = field(default_factory=list)  # explained by an entry of known.KNOWN
    nonfinite_results: list[Failure] = field(default_factory=list)  # derivatives where the kernel's value is inf/nan
    seconds: float = 0.0

    def summary(self) -> str:
        return (f"{self.kernels} kernels, {self.exports} exports, {self.checks} checks: {len(self.failures)} new "
                f"failures {_count(self.failures)}, {len(self.known)} known {_count(self.known, True)}, "
                f"{len(self.nonfinite_results)} derivatives differ where the kernel's value is inf/nan (not "
                f"failures), {self.torch_nan} oracle-nan results not compared, {self.seconds:.0f} s")


def _count(failures, known: bool = False) -> dict:
    kinds: dict[str, int] = {}
    for f in failures:
        k = explained(f).name if known else f.stage
        kinds[k] = kinds.get(k, 0) + 1
    return kinds


def make_case(seed: int, index: int) -> Case:
    """Kernel `index` of run `seed` and its exports (the core nestings and a few random ones)."""
    rng = np.random.default_rng([seed, index])
    name = f"k{index}"
    kernel = scalar_kernel(rng, name) if rng.random() < 0.55 else tensor_kernel(rng, name)
    case = Case(seed, index, kernel, {})
    base = kernel.base
    chosen = nesting.core_nestings(base, case.lanes)
    for _ in range(EXTRA_NESTINGS):
        t = nesting.random_nesting(rng, base, 3, case.lanes)
        if t is not None:
            chosen.append(t)
    for t in chosen:
        text = nesting.text(t, name)
        if text not in {nesting.text(u, name) for u in case.exports.values()}:
            case.exports[f"{name}_e{len(case.exports)}"] = t
    return case


def source_of(cases: list[Case]) -> str:
    return HEADER + "\n\n".join(c.kernel.source for c in cases)


def manifest_of(package: str, module: str, cases: list[Case], only: dict | None = None) -> str:
    """A float64 manifest of the cases' kernels and exports (only: {case index: [export names]})."""
    lines = ["[package]", f'name = "{package}"', 'version = "0.1.0"', "", "[build]", 'dtype = "float64"', ""]
    for c in cases:
        lines += [f"[kernels.{c.kernel.name}]", f'python = "{module}.py:{c.kernel.name}"', ""]
    lines.append("[exports]")
    for c in cases:
        for e, t in c.exports.items():
            if only is None or e in only.get(c.index, ()):
                lines.append(f'{e} = "{nesting.text(t, c.kernel.name)}"')
    return "\n".join(lines) + "\n"


# ---- comparing ------------------------------------------------------------------------------------------


def compare(got, want, rtol: float, atol: float, nan_free: bool, skip=None) -> str | None:
    """None when got matches want: equal shapes, finite values close (atol scaled by the largest finite
    |want|), infinities equal; a nan in want matches anything unless nan_free (then got's nan must be there).
    Where `skip` (a mask) is true, anything matches."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if skip is not None:
        got, want = np.where(skip, 0.0, got), np.where(skip, 0.0, want)
    finite = np.isfinite(want)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    bad = finite & ~(np.abs(got - want) <= atol * scale + rtol * np.abs(want))
    bad |= np.isinf(want) & (got != want)
    if nan_free:
        bad |= np.isnan(want) != np.isnan(got)
    if not bad.any():
        return None
    k = np.argwhere(bad)[0]
    idx = tuple(int(i) for i in k)
    return f"at {idx}: got {got[idx]!r}, want {want[idx]!r} ({int(bad.sum())} of {bad.size} differ)"


def compare_all(gots, wants, rtol, atol, nan_free, skips=None) -> str | None:
    if len(gots) != len(wants):
        return f"{len(gots)} results, want {len(wants)}"
    for k, (g, w) in enumerate(zip(gots, wants)):
        msg = compare(g, w, rtol, atol, nan_free, None if skips is None else skips[k])
        if msg:
            return f"result {k}: {msg}"
    return None


# ---- one batch ------------------------------------------------------------------------------------------


def check_batch(cases: list[Case], work: Path, report: Report, log=print, compiled: bool = True) -> None:
    """Check every export of `cases`: interpreter vs torch, then (one package for all) compiled vs interpreter."""
    from ksbuild.errors import KsbuildError, Location
    from ksbuild.exports import apply_transform
    from ksbuild.frontends.python.source import compile_python_kernel
    from ksbuild.ir.interp import eval_func
    from ksbuild.manifest import parse_transform

    module = f"fz{cases[0].seed}_{cases[0].index}"
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{module}.py"
    path.write_text(source_of(cases))
    ok: dict[int, list[str]] = {}
    interp_results: dict[tuple[int, str], list] = {}
    for c in cases:
        report.kernels += 1
        torch_fn = torch_shim.load(HEADER + c.kernel.source)[c.kernel.name]
        try:
            ir = compile_python_kernel(path, c.kernel.name, "f64")
        except Exception as e:  # noqa: BLE001 - every error is a finding
            _fail(report, log, Failure(c, "", "frontend", _msg(e, KsbuildError)))
            continue
        rng = np.random.default_rng([c.seed, c.index, 1])
        for e, t in c.exports.items():
            report.exports += 1
            text = nesting.text(t, c.kernel.name)
            try:
                f = apply_transform(parse_transform(text, Location(str(path)), [c.kernel.name]),
                                    {c.kernel.name: ir}, Location(str(path)))
            except Exception as err:  # noqa: BLE001
                _fail(report, log, Failure(c, e, "transform", _msg(err, KsbuildError)))
                continue
            watch = torch_shim.NonFinite()
            oracle = nesting.oracle(t, torch_fn, c.kernel.base, c.lanes, watch)
            runs = []
            for _ in range(POINTS):
                xs = nesting.make_inputs(t, c.kernel.base, c.lanes, c.kernel.point, rng)
                watch.seen = watch.result_nonfinite = False
                failure, got, want = _check_interp(c, e, t, f, oracle, xs, report, eval_func, watch)
                if failure:
                    _fail(report, log, failure)
                    break
                runs.append((xs, got, [np.isnan(w) for w in want]))
            else:
                ok.setdefault(c.index, []).append(e)
                interp_results[(c.index, e)] = runs
    if compiled and ok:
        _check_compiled(cases, work, module, ok, interp_results, report, log)


def interp_results_of(f, xs, eval_func) -> list:
    return [np.asarray(r) for r in eval_func(f, xs)]


def _check_interp(c, e, t, f, oracle, xs, report, eval_func, watch):
    """(failure or None, the interpreter's results, torch's) of export e at inputs xs."""
    try:
        got = interp_results_of(f, xs, eval_func)
    except Exception as err:  # noqa: BLE001
        return Failure(c, e, "interpreter", _msg(err, ()), xs), None, None
    try:
        want = [w.detach().numpy(force=True) for w in oracle(*[torch.tensor(x) for x in xs])]
    except Exception as err:  # noqa: BLE001 - the oracle fails: not ksbuild's fault, but report it
        return Failure(c, e, "oracle-error", f"{type(err).__name__}: {err}", xs), None, None
    report.checks += 1
    report.torch_nan += sum(int(np.isnan(w).any()) for w in want)
    derivative = t[0] != "kernel" and not (t[0] == "vmap" and t[1][0] == "kernel")
    msg = compare_all(got, want, rtol=1e-6, atol=1e-8, nan_free=False)
    if msg is None and derivative:
        msg = _nan_where_torch_finite(got, want)
    if msg is None:
        return None, got, want
    stage = "nonfinite-result" if watch.result_nonfinite else \
        "nonfinite-intermediate" if watch.seen else "interpreter-vs-torch"
    return Failure(c, e, stage, msg, xs), None, None


def _nan_where_torch_finite(got, want) -> str | None:
    for k, (g, w) in enumerate(zip(got, want)):
        if np.any(np.isnan(g) & ~np.isnan(np.asarray(w))):
            return f"result {k}: nan where torch gives a number"
    return None


def _check_compiled(cases, work, module, ok, interp_results, report, log) -> None:
    import ksbuild
    from ksbuild.errors import KsbuildError

    work.mkdir(parents=True, exist_ok=True)
    (work / f"{module}.py").write_text(source_of(cases))
    (work / "manifest.toml").write_text(manifest_of(module, module, cases, ok))
    try:
        pkg = ksbuild.build(work / "manifest.toml", out=work / "dist", quiet=True)
    except Exception as err:  # noqa: BLE001
        named = _exports_in_error(str(err), module, ok)
        if named:  # the compiler named the functions: record them, build the rest
            for i, e in named:
                c = next(c for c in cases if c.index == i)
                _fail(report, log, Failure(c, e, "build", _msg(err, KsbuildError)[-3000:]))
            rest = {i: [e for e in es if (i, e) not in named] for i, es in ok.items()}
            rest = {i: es for i, es in rest.items() if es}
            if rest:
                _check_compiled(cases, work / f"rest{len(named)}", module, rest, interp_results, report, log)
            return
        if len([e for es in ok.values() for e in es]) == 1:
            c = next(c for c in cases if c.index in ok)
            _fail(report, log, Failure(c, ok[c.index][0], "build", _msg(err, KsbuildError)))
            return
        for part in _halves(cases, ok):  # find the export that breaks the build
            sub = work / f"part{part[0][0]}_{part[0][1]}"
            _check_compiled(cases, sub, module, {i: [e for j, e in part if j == i] for i, _ in part},
                            interp_results, report, log)
        return
    by_index = {c.index: c for c in cases}
    for i, es in ok.items():
        for e in es:
            for xs, want, torch_nan in interp_results[(i, e)]:
                msg = _call_compiled(pkg, e, xs, want, torch_nan)
                if msg:
                    _fail(report, log, Failure(by_index[i], e, "compiled-vs-interpreter", msg, xs))
                    break


def _exports_in_error(text: str, module: str, ok) -> set[tuple[int, str]]:
    """The exports whose C functions (`<module>_<export>(`) a compiler error names."""
    import re
    names = set(re.findall(rf"\b{module}_(k\d+_e\d+)\(", text))
    return {(i, e) for i, es in ok.items() for e in es if e in names}


def _halves(cases, ok) -> list[list[tuple[int, str]]]:
    pairs = [(i, e) for i, es in ok.items() for e in es]
    mid = len(pairs) // 2
    return [pairs[:mid], pairs[mid:]]


def _call_compiled(pkg, e, xs, want, torch_nan) -> str | None:
    """How the compiled export differs from the interpreter (nan where torch gives a number included)."""
    try:
        got = getattr(pkg, e)(*[x if x.ndim else float(x) for x in xs])
    except Exception as err:  # noqa: BLE001
        return f"call failed: {type(err).__name__}: {err}"
    got = list(got) if isinstance(got, tuple) else [got]
    return compare_all(got, want, rtol=1e-7, atol=1e-9, nan_free=True, skips=torch_nan)


def _msg(err: Exception, ksbuild_error) -> str:
    if ksbuild_error and isinstance(err, ksbuild_error):
        return f"KsbuildError: {err}"
    tb = traceback.extract_tb(err.__traceback__)
    where = f" ({tb[-1].filename.split('/ksbuild/')[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(err).__name__}: {err}{where}"


def _fail(report: Report, log, failure: Failure) -> None:
    if failure.stage == "nonfinite-result":
        report.nonfinite_results.append(failure)
        return
    known = explained(failure)
    (report.known if known else report.failures).append(failure)
    what = f"KNOWN ({known.name})" if known else "FAIL"
    log(f"{what} {failure.case.tag} {failure.export} [{failure.stage}]: {failure.message}")


# ---- failures on disk -----------------------------------------------------------------------------------


def write_case(failure: Failure, folder: Path) -> Path:
    """A folder with the kernel (kernel.py), a manifest of the failing export, the inputs and what failed."""
    c = failure.case
    d = folder / f"seed{c.seed}_k{c.index}_{failure.export or 'frontend'}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.py").write_text(HEADER + c.kernel.source)
    only = {c.index: [failure.export]} if failure.export else {c.index: []}
    (d / "manifest.toml").write_text(manifest_of("repro", "kernel", [c], only))
    info = {"seed": c.seed, "kernel": c.index, "export": failure.export, "stage": failure.stage,
            "message": failure.message,
            "expression": nesting.text(c.exports[failure.export], c.kernel.name) if failure.export else None,
            "inputs": [np.asarray(x).tolist() for x in failure.inputs or []],
            "rerun": f"python -m fuzz --seed {c.seed} --only {c.index}"}
    (d / "failure.json").write_text(json.dumps(info, indent=1) + "\n")
    return d


def run(budget: int, seed: int, batch: int, work: Path, out: Path, log=print, only: int | None = None,
        compiled: bool = True) -> Report:
    """Check kernels of run `seed` in batches of `batch` until `budget` exports are checked."""
    report = Report()
    start, index = time.time(), 0
    while report.exports < budget:
        indices = [only] if only is not None else range(index, index + batch)
        cases = [make_case(seed, i) for i in indices]
        check_batch(cases, work / f"batch{index}", report, log, compiled)
        log(f"batch {index}: {report.summary()}")
        index += batch
        if only is not None:
            break
    report.seconds = time.time() - start
    for f in report.failures:
        write_case(f, out)
    for f in report.known:
        write_case(f, out / "known")
    return report
