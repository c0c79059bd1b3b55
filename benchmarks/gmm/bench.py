"""GMM benchmark (ADBench): objective time F and gradient time J for ksbuild, torch, torch.compile, jax.

    python benchmarks/gmm/bench.py --quick [--no-ksbuild]
    python benchmarks/gmm/bench.py --d 2,10 --K 5,25 --n 1000 [--repeats 10] [--budget 3] [--threads 1]
    python benchmarks/gmm/bench.py --kernel gmm_loop      # the per-observation loop form

Everything runs in float64 on the ADBench data of examples/gmm/reference.py (α, q, l, x ~ N(0, 1),
μ ~ U(0, 1), γ = 1, m = 0). Contenders:
- ksbuild: `pkg.gmm(...)` -> float and `pkg.gmm_grad(...)` -> (d_alphas, d_means, d_icf) of the
  package built from examples/gmm/manifest.toml with the plain backend (loops only, runtime-free);
  "-" with the reason if the build or exports fail. --kernel gmm_loop times the loop form instead.
- ksbuild+blas: the same package built with backend = "blas" (batched products through CBLAS;
  --threads also sets OPENBLAS_NUM_THREADS).
- torch eager: the vectorized objective under torch.no_grad() (F); forward + torch.autograd.grad (J).
- torch.compile: the objective (F) and torch.func.grad_and_value of it (J), each compiled per size
  (falling back to the compiled objective + autograd.grad); compilation and warm-up are not timed.
- jax: jax.jit of the objective (F) and of jax.value_and_grad (J), with block_until_ready.

Every J is the full gradient call, forward included, as in ADBench. Before timing, each tool's
value and gradient are compared with torch.autograd in float64; the "err" column is the ADBench
metric max |a - b| / max(1, |a| + |b|) over the value and every gradient entry (should be < 1e-8,
flagged with "!" otherwise). Each time is the MINIMUM over up to --repeats samples; one sample is a
loop of enough calls to last --min-ms, and a measurement stops taking samples after --budget s.
The ratio columns are speedups of each ksbuild build's J: (torch eager J) / (its J) and (jax J) / (its J).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples" / "gmm" / "manifest.toml"
sys.path.insert(0, str(ROOT))  # `import ksbuild` from a source checkout
TOOLS = ("ksbuild", "ksblas", "eager", "compile", "jax")
TITLES = {"ksbuild": "ksbuild", "ksblas": "ksbuild+blas", "eager": "torch eager", "compile": "torch.compile",
          "jax": "jax.jit"}
BACKENDS = {"ksbuild": "plain", "ksblas": "blas"}
FULL = {"d": [2, 10, 20, 32, 64], "K": [5, 10, 25, 50, 100], "n": [1000, 10000]}
QUICK = {"d": [2, 10], "K": [5, 25], "n": [1000]}
ERR_LIMIT = 1e-8
warnings.filterwarnings("ignore", category=FutureWarning, module="torch")  # inductor's deprecation noise


def load_reference():
    """examples/gmm/reference.py as a module, imported by file path.

    It is registered in sys.modules because torch.compile looks functions' modules up there.
    """
    spec = importlib.util.spec_from_file_location("gmm_reference", ROOT / "examples" / "gmm" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ref = load_reference()


# ----------------------------------------------------------------------------- contenders
@dataclass
class Bound:
    """One tool bound to one data set: zero-argument calls returning the value / the three gradients."""

    f: Callable[[], object]
    j: Callable[[], tuple]


def short_reason(e: BaseException) -> str:
    """The exception's type and the first line of its message, at most 120 characters."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:120]


def data_args(data: dict) -> tuple:
    """(alphas, means, icf, x, gamma, m) from a make_data dict."""
    return tuple(data[k] for k in ("alphas", "means", "icf", "x", "gamma", "m"))


def bind_ksbuild(pkg, data: dict, kernel: str) -> Bound:
    """pkg.<kernel> / pkg.<kernel>_grad on the numpy arrays."""
    args = data_args(data)
    f, j = getattr(pkg, kernel), getattr(pkg, kernel + "_grad")
    return Bound(lambda: f(*args), lambda: j(*args))


def bind_eager(data: dict) -> Bound:
    """The torch objective under no_grad (F) and forward + autograd.grad (J)."""
    import torch

    gamma, m = data["gamma"], data["m"]
    plain = ref.torch_inputs(data)
    leaves = ref.torch_inputs(data, requires_grad=True)

    def f():
        with torch.no_grad():
            return ref.gmm_objective_torch(*plain, gamma, m)

    def j():
        value = ref.gmm_objective_torch(*leaves, gamma, m)
        return torch.autograd.grad(value, leaves[:3])

    return Bound(f, j)


def bind_compile(data: dict) -> Bound:
    """torch.compile of the objective and of its gradient (grad_and_value, else compiled fwd + autograd)."""
    import torch

    torch._dynamo.reset()  # a fresh cache per size: no recompile limit, no automatic dynamic shapes
    gamma, m = data["gamma"], data["m"]

    def objective(alphas, means, icf, x):
        return ref.gmm_objective_torch(alphas, means, icf, x, gamma, m)

    plain = ref.torch_inputs(data)
    f_compiled = torch.compile(objective, dynamic=False)
    f = lambda: f_compiled(*plain)
    try:
        g_compiled = torch.compile(torch.func.grad_and_value(objective, argnums=(0, 1, 2)), dynamic=False)
        g_compiled(*plain)
        return Bound(f, lambda: g_compiled(*plain)[0])
    except Exception as e:  # noqa: BLE001 - fall back to autograd through the compiled objective
        print(f"  torch.compile grad_and_value failed ({short_reason(e)}); using compiled fwd + autograd")
    leaves = ref.torch_inputs(data, requires_grad=True)
    return Bound(f, lambda: torch.autograd.grad(f_compiled(*leaves), leaves[:3]))


def bind_jax(data: dict) -> Bound:
    """jax.jit of the objective and of value_and_grad, each call blocked until ready."""
    import jax

    args = (*ref.jax_inputs(data), data["gamma"], data["m"])
    f_jit, vg_jit = ref.jax_objective_jit(), ref.jax_value_and_grad_jit()
    return Bound(lambda: jax.block_until_ready(f_jit(*args)),
                 lambda: jax.block_until_ready(vg_jit(*args))[1])


def load_ksbuild(backend: str, cpu: str = ""):
    """(package, "") from ksbuild.build of the GMM manifest, or (None, reason) if that fails.
    A cpu (e.g. native) builds a copy of the example with [build] cpu set."""
    try:
        import ksbuild

        manifest = MANIFEST
        if cpu:
            import shutil
            import tempfile
            folder = Path(tempfile.mkdtemp(prefix="gmm-cpu-")) / "gmm"
            shutil.copytree(MANIFEST.parent, folder)
            text = (folder / "manifest.toml").read_text().replace("[build]\n", f'[build]\ncpu = "{cpu}"\n', 1)
            (folder / "manifest.toml").write_text(text)
            manifest = folder / "manifest.toml"
        return ksbuild.build(manifest, backend=backend, portable=True), ""
    except Exception as e:  # noqa: BLE001 - any failure makes ksbuild an unavailable column
        return None, short_reason(e)


def tool_available(tool: str) -> str:
    """'' if the tool's library imports, else the reason it does not (ksbuild is checked separately)."""
    module = {"eager": "torch", "compile": "torch", "jax": "jax"}.get(tool)
    if module is None:
        return ""
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001
        return short_reason(e)
    return ""


def bind(tool: str, data: dict, pkgs: dict, kernel: str) -> Bound:
    """The tool's Bound for this data set."""
    if tool in BACKENDS:
        return bind_ksbuild(pkgs[tool], data, kernel)
    binders = {"eager": bind_eager, "compile": bind_compile, "jax": bind_jax}
    return binders[tool](data)


# ----------------------------------------------------------------------------- checking
@dataclass
class Reference:
    """torch.autograd float64 value and gradients of one data set."""

    value: float
    grads: tuple


def make_reference(data: dict) -> Reference:
    """The torch float64 reference, itself checked against the numpy oracle (a warning if they differ)."""
    value, *grads = ref.gmm_grad_torch(data)
    oracle = ref.gmm_objective_numpy(*data_args(data))
    if ref.rel_error(value, oracle) > ERR_LIMIT:
        print(f"  WARNING: torch reference {value!r} differs from the numpy oracle {oracle!r}")
    return Reference(value, tuple(grads))


def max_error(bound: Bound, want: Reference) -> float:
    """Max ADBench error of the tool's value and gradients against the reference (also warms up)."""
    value = float(np.asarray(bound.f()))
    grads = [np.asarray(g) for g in bound.j()]
    errors = [ref.rel_error(value, want.value)]
    errors += [ref.rel_error(g, w) for g, w in zip(grads, want.grads, strict=True)]
    return max(errors)


# ----------------------------------------------------------------------------- timing
def loop_time(fn: Callable[[], object], k: int) -> float:
    """Seconds for k back-to-back calls."""
    start = time.perf_counter()
    for _ in range(k):
        fn()
    return time.perf_counter() - start


def min_time(fn: Callable[[], object], repeats: int, min_s: float, budget_s: float) -> float:
    """Seconds per call: the minimum over up to `repeats` samples of k calls (each >= min_s), within budget_s."""
    start = time.perf_counter()
    k = 1
    while (t := loop_time(fn, k)) < min_s:
        k = max(2 * k, math.ceil(k * 1.2 * min_s / max(t, 1e-9)))
    best = t / k
    for _ in range(repeats - 1):
        if time.perf_counter() - start > budget_s:
            break
        best = min(best, loop_time(fn, k) / k)
    return best


# ----------------------------------------------------------------------------- one configuration
@dataclass
class Result:
    """One tool at one size: F and J in seconds and the max error, or why it is missing."""

    f: float = math.nan
    j: float = math.nan
    err: float = math.nan
    na: str = ""


@dataclass
class Row:
    """One table row: the size and every tool's result."""

    d: int
    K: int
    n: int
    results: dict = field(default_factory=dict)


def measure(tool: str, data: dict, want: Reference, pkgs: dict, args) -> Result:
    """Bind, check and time one tool; any failure becomes Result.na."""
    try:
        bound = bind(tool, data, pkgs, args.kernel)
        err = max_error(bound, want)
        f = min_time(bound.f, args.repeats, args.min_ms / 1e3, args.budget)
        j = min_time(bound.j, args.repeats, args.min_ms / 1e3, args.budget)
    except Exception as e:  # noqa: BLE001 - a failing tool is a "-" column, never a crash
        return Result(na=short_reason(e))
    return Result(f, j, err)


def run_config(d: int, K: int, n: int, tools: dict, pkgs: dict, args) -> Row:
    """Generate the data of one size and measure every tool on it."""
    data = ref.make_data(d, K, n, seed=args.seed)
    want = make_reference(data)
    row = Row(d, K, n)
    for tool, na in tools.items():
        row.results[tool] = Result(na=na) if na else measure(tool, data, want, pkgs, args)
    return row


# ----------------------------------------------------------------------------- table
COL = 9  # width of one number column


def fmt_ms(seconds: float) -> str:
    """Milliseconds with about four significant digits, '-' if missing."""
    if math.isnan(seconds):
        return "-"
    ms = seconds * 1e3
    return f"{ms:.4f}" if ms < 1 else f"{ms:.3g}" if ms >= 1000 else f"{ms:.4g}"


def fmt_ratio(num: float, den: float) -> str:
    """num / den to two decimals, '-' if either is missing."""
    return "-" if math.isnan(num) or math.isnan(den) or den == 0 else f"{num / den:.2f}"


def fmt_err(err: float) -> str:
    """The error in short scientific form, '!' appended above the limit, '-' if missing."""
    if math.isnan(err):
        return "-"
    return f"{err:.0e}" + ("!" if err > ERR_LIMIT else "")


def header_lines(tools: list[str]) -> list[str]:
    """The two header lines: tool names over their four columns, then the column names."""
    group = 4 * COL
    ours = [t for t in tools if t in BACKENDS]
    top = f"{'':>15}" + "".join(f"{TITLES[t]:^{group}}" for t in tools) + "".join(
        f"{TITLES[t] + ' J speedup':^{2 * COL}}" for t in ours)
    sub = f"{'d':>4}{'K':>5}{'n':>6}" + "".join(
        f"{'F ms':>{COL}}{'J ms':>{COL}}{'J/F':>{COL}}{'err':>{COL}}" for _ in tools)
    return [top, sub + f"{'vs eager':>{COL}}{'vs jax':>{COL}}" * len(ours)]


def format_row(row: Row, tools: list[str]) -> str:
    """One table line: the size, each tool's F, J, J/F and error, then ksbuild's J speedups."""
    text = f"{row.d:>4}{row.K:>5}{row.n:>6}"
    for t in tools:
        r = row.results[t]
        text += "".join(f"{s:>{COL}}" for s in (fmt_ms(r.f), fmt_ms(r.j), fmt_ratio(r.j, r.f), fmt_err(r.err)))
    for ours in (t for t in tools if t in BACKENDS):
        for t in ("eager", "jax"):
            text += f"{fmt_ratio(row.results.get(t, Result()).j, row.results[ours].j):>{COL}}"
    return text


def print_notes(rows: list[Row], tools: dict) -> None:
    """Why each missing cell is missing, once per distinct (tool, reason); whole-tool reasons count as seen."""
    seen = {(t, na) for t, na in tools.items() if na}
    for row in rows:
        for t in tools:
            na = row.results[t].na
            if na and (t, na) not in seen:
                seen.add((t, na))
                print(f"  {TITLES[t]}: unavailable ({na})")


def print_header(args, tools: dict) -> None:
    """Machine, library versions and threads, and the ksbuild status line."""
    print("GMM benchmark (ADBench), float64; times are minima over samples, J includes the forward pass")
    print(f"  CPU: {cpu_name()}, os.cpu_count() = {os.cpu_count()}; python {platform.python_version()}, "
          f"numpy {np.__version__}")
    if is_available(tools, "eager"):
        import torch

        print(f"  torch {torch.__version__}, {torch.get_num_threads()} threads")
    if is_available(tools, "jax"):
        import jax

        print(f"  jax {jax.__version__} on {jax.devices()[0]}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    if any(is_available(tools, t) for t in BACKENDS):
        print(f"  ksbuild: {MANIFEST}, exports {args.kernel} and {args.kernel}_grad")
    for tool, reason in tools.items():
        if reason:
            print(f"  {tool}: unavailable ({reason})")
    print(f"  samples: up to {args.repeats} per time, each >= {args.min_ms} ms, <= {args.budget} s per time")


def cpu_name() -> str:
    """The 'model name' line of /proc/cpuinfo, or the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


# ----------------------------------------------------------------------------- main
def int_list(text: str) -> list[int]:
    """'2,10' -> [2, 10]."""
    return [int(s) for s in text.split(",") if s.strip()]


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line options; sizes default to the full ADBench grid (or --quick)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d", type=int_list, help="dimensions (default 2,10,20,32,64)")
    p.add_argument("--K", type=int_list, help="components (default 5,10,25,50,100)")
    p.add_argument("--n", type=int_list, help="data points (default 1000,10000)")
    p.add_argument("--quick", action="store_true", help="d in {2,10}, K in {5,25}, n = 1000")
    p.add_argument("--repeats", type=int, default=10, help="max samples per time; the minimum is reported")
    p.add_argument("--min-ms", type=float, default=20.0, help="minimum duration of one sample (default 20 ms)")
    p.add_argument("--budget", type=float, default=3.0, help="stop sampling one time after this many seconds")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated subset of {','.join(TOOLS)}")
    p.add_argument("--no-ksbuild", action="store_true", help="leave ksbuild out")
    p.add_argument("--cpu", default="", help="build ksbuild with [build] cpu = CPU (e.g. native; default: baseline)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads and OPENBLAS_NUM_THREADS (0: the libraries' defaults)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    p.add_argument("--kernel", default="gmm", choices=("gmm", "gmm_loop", "gmm_tri", "gmm_tri_vec"),
                   help="which ksbuild export: gmm (batched, default), gmm_loop (a loop over observations) "
                        "gmm_tri (loops down to the triangular row sums) or gmm_tri_vec (the same over all k at once)")
    args = p.parse_args(argv)
    grid = QUICK if args.quick else FULL
    for key in ("d", "K", "n"):
        if getattr(args, key) is None:
            setattr(args, key, grid[key])
    return args


def is_available(tools: dict, tool: str) -> bool:
    """True if the tool was asked for and loads."""
    return tools.get(tool) == ""


def select_tools(args) -> dict:
    """{tool: reason it is unavailable, or ''} for the tools asked for, in TOOLS order."""
    wanted = [t for t in TOOLS if t in args.tools.split(",") and not (t in BACKENDS and args.no_ksbuild)]
    return {t: tool_available(t) for t in wanted}


def main(argv: list[str]) -> int:
    """Run every configuration, printing the table row by row."""
    args = parse_args(argv)
    if args.threads:
        os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)  # read when the BLAS library loads
        # XLA runs large ops on an Eigen pool of all cores unless told otherwise (read before jax loads)
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                                   f" intra_op_parallelism_threads={args.threads}").strip()
    if reason := tool_available("eager"):
        print(f"torch is required (it computes the float64 reference): {reason}", file=sys.stderr)
        return 2
    tools = select_tools(args)
    pkgs = {}
    for tool in (t for t in tools if t in BACKENDS):
        pkgs[tool], tools[tool] = load_ksbuild(BACKENDS[tool], args.cpu)
    if args.threads and is_available(tools, "eager"):
        import torch

        torch.set_num_threads(args.threads)
    print_header(args, tools)
    names = list(tools)
    print("\n" + "\n".join(header_lines(names)), flush=True)
    rows = []
    for d in args.d:
        for K in args.K:
            for n in args.n:
                rows.append(run_config(d, K, n, tools, pkgs, args))
                print(format_row(rows[-1], names), flush=True)
    print_notes(rows, tools)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
