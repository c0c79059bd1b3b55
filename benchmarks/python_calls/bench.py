"""Python call overhead: one call of examples/relu3's vrelu3 on 16 float32 elements, every way Python calls it.

    PYTHONPATH=. python benchmarks/python_calls/bench.py [--repeat 7] [--min-ms 20] [--before REV]

At 16 elements the kernel itself takes a few nanoseconds: each time is what the call costs in
Python (argument checks, dims, output allocation, ctypes). Rows, all on the same data:
- numpy ufunc `np.maximum(a, 0)` and torch eager `torch.relu(x)`: one library op, for scale;
- ksbuild raw C call: the ctypes symbol on precomputed addresses and a preallocated output (the floor);
- ksbuild export on numpy `pkg.vrelu3(a)`, and with `out=`;
- ksbuild export on a torch tensor `pkg.vrelu3(x)` (eager CPU tensors without autograd call the C
  code directly, not through the dispatcher);
- ksbuild custom op: the export's torch.library op called on a tensor, what torch.compile and
  torch.export graphs call (dispatcher, autograd key, then the same C call);
- ksbuild dev loop `ksbuild.vmap(relu3)(x)` and its `nnModule()`.
`--before REV` adds the export, torch and custom-op rows with runtime.py and torch_ops.py as they
were at git revision REV (a copy of the same built package, renamed so that its torch ops do not
collide). Each time is the median of --repeat measurements, measured in rounds (every case once per
round, so that load on the machine hits them alike); one measurement is a loop of at least --min-ms.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch

import ksbuild

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples" / "relu3" / "manifest.toml"
KNOSSOS = ("Knossos (issue 34, quoting Knossos' own benchmark of the same vrelu3 call; not in /work/shared/seeds): "
           "7.8 us, against PyTorch's 18.3 us on its machine")
TARGETS = {"ksbuild export, numpy: pkg.vrelu3(a)": 5e-6, "ksbuild custom op: op(x)": 10e-6}


def _torch_bench():
    """benchmarks/torch/bench.py as a module (its timing helpers: per_call, measure, load_relu3)."""
    spec = importlib.util.spec_from_file_location("torch_bench", ROOT / "benchmarks" / "torch" / "bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def reference(x: np.ndarray) -> np.ndarray:
    """relu3 elementwise in float64, as the kernel's source says."""
    x = x.astype(np.float64)
    return np.where(x < 0, 0.0, np.where(x < 1, x ** 3 / 3, x - 2 / 3))


def raw_call(export, a: np.ndarray, out: np.ndarray) -> Callable[[], object]:
    """The export's C symbol through ctypes on fixed addresses: what any Python wrapper adds to."""
    n, pa, po = a.shape[0], a.ctypes.data, out.ctypes.data
    return lambda: export.fn(n, pa, po, None)


def custom_op(pkg, name: str):
    """The torch.library op of export `name` (what torch.compile and torch.export call)."""
    ops = pkg.torch_ops()
    return ops.ops[name] if hasattr(ops, "ops") else getattr(getattr(torch.ops, ops.namespace), name)


def current_cases(a: np.ndarray, x: torch.Tensor) -> dict[str, tuple[Callable, object]]:
    """(call, its result) of every row measured with the runtime of this working tree."""
    pkg = ksbuild.build(MANIFEST)
    relu3 = _torch_bench().load_relu3()
    kernel = ksbuild.vmap(relu3)
    module = kernel.nnModule()
    out, raw_out = np.empty_like(a), np.empty_like(a)
    op = custom_op(pkg, "vrelu3")
    cases = {
        "numpy ufunc: np.maximum(a, 0)": lambda: np.maximum(a, np.float32(0)),
        "torch eager: torch.relu(x)": lambda: torch.relu(x),
        "ksbuild raw C call (ctypes, fixed addresses)": raw_call(pkg.vrelu3, a, raw_out),
        "ksbuild export, numpy: pkg.vrelu3(a)": lambda: pkg.vrelu3(a),
        "ksbuild export, numpy, out=: pkg.vrelu3(a, out=o)": lambda: pkg.vrelu3(a, out=out),
        "ksbuild export, torch: pkg.vrelu3(x)": lambda: pkg.vrelu3(x),
        "ksbuild custom op: op(x)": lambda: op(x),
        "ksbuild dev loop: ksbuild.vmap(relu3)(x)": lambda: kernel(x),
        "ksbuild dev loop: vmap(relu3).nnModule()(x)": lambda: module(x),
    }
    results = {name: fn() for name, fn in cases.items()}
    results["ksbuild raw C call (ctypes, fixed addresses)"] = raw_out
    results["numpy ufunc: np.maximum(a, 0)"] = results["torch eager: torch.relu(x)"] = None
    return {name: (fn, results[name]) for name, fn in cases.items()}


def before_cases(rev: str, a: np.ndarray, x: torch.Tensor, tmp: Path) -> dict[str, tuple[Callable, object]]:
    """The export, torch and custom-op rows with runtime.py and torch_ops.py of git revision `rev`."""
    code = tmp / "code"
    code.mkdir()
    for name in ("runtime.py", "torch_ops.py"):
        text = subprocess.run(["git", "show", f"{rev}:ksbuild/packaging/{name}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        (code / name).write_text(text)
    sys.path.insert(0, str(code))
    spec = importlib.util.spec_from_file_location("runtime_before", code / "runtime.py")
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    pkg = runtime.load(_renamed_copy(ksbuild.build(MANIFEST).root, tmp / "pkg", "activations_before"))
    op = custom_op(pkg, "vrelu3")
    cases = {f"[{rev}] ksbuild export, numpy: pkg.vrelu3(a)": lambda: pkg.vrelu3(a),
             f"[{rev}] ksbuild export, torch: pkg.vrelu3(x)": lambda: pkg.vrelu3(x),
             f"[{rev}] ksbuild custom op: op(x)": lambda: op(x)}
    return {name: (fn, fn()) for name, fn in cases.items()}


def _renamed_copy(root: Path, dest: Path, name: str) -> Path:
    """A copy of an installed package under another package name (and content key): its own torch ops."""
    shutil.copytree(root, dest)
    share = next((dest / "share").iterdir())
    desc = json.loads((share / f"{share.name}.json").read_text())
    desc["package"] = name
    renamed = share.with_name(name)
    share.rename(renamed)
    (renamed / f"{share.name}.json").unlink()
    (renamed / f"{name}.json").write_text(json.dumps(desc))
    (renamed / "ksbuild-hash").write_text("0" * 64)
    return dest


def check(cases: dict[str, tuple[Callable, object]], a: np.ndarray) -> None:
    """Every ksbuild row computes relu3 (float32 against the float64 reference)."""
    want = reference(a)
    for name, (_, got) in cases.items():
        if got is not None:
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-7, err_msg=name)


def print_table(times: dict[str, float], base: str) -> None:
    print(f"  {'case':62s} {'median':>10s}  {'/ ' + base.split(':')[0]:>18s}  target")
    for name, t in times.items():
        target = TARGETS.get(name)
        mark = f"<= {target * 1e6:.0f} us: {'met' if t <= target else 'NOT met'}" if target else ""
        print(f"  {name:62s} {t * 1e6:7.2f} us  {t / times[base]:18.2f}  {mark}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--min-ms", type=float, default=20.0)
    p.add_argument("--before", metavar="REV", help="also time the runtime of this git revision")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    a = np.linspace(-2, 3, 16, dtype=np.float32)
    x = torch.from_numpy(a.copy())
    with tempfile.TemporaryDirectory() as tmp:
        cases = current_cases(a, x)
        if args.before:
            cases.update(before_cases(args.before, a, x, Path(tmp)))
        check(cases, a)
        times = _torch_bench().measure({name: fn for name, (fn, _) in cases.items()}, args.repeat,
                                       args.min_ms / 1e3)
    print(f"vrelu3 on 16 float32 elements; torch {torch.__version__} (1 thread), numpy {np.__version__}, "
          f"python {sys.version.split()[0]}; median of {args.repeat} x >= {args.min_ms:g} ms")
    print_table(times, "torch eager: torch.relu(x)")
    print(f"  reference: {KNOSSOS}")


if __name__ == "__main__":
    main()
