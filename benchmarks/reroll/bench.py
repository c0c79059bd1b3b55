"""ADBench's LSTM objective through the torch.export frontend, as the sequence grows: where the build time goes.

    PYTHONPATH=. python benchmarks/reroll/bench.py [--sizes 16,64,256,1024] [--timeout 900] [--model loop|scan]
        [--clock wall|cpu]

For each sequence length c (l = 2 layers, b = 14 bits, float64) a package with the objective F and its gradient
G = grad(F, argnums=(0, 1)) (main and extra parameters, as GradBench asks) is built in a fresh folder, one
size per subprocess (killed after --timeout seconds; the stages it finished are shown). Columns: eqns, the
frontend's equations; export_s, torch.export.export and run_decompositions; front_s, the whole frontend (that,
the FX import and reroll); pipeline_s, the transformation grad and the passes of F and G; compile_s, cmake's
build of the package; build_s, the whole `ksbuild.build` (frontend, passes, rendering, compile); lines, the
generated C++ (share/*/src/*.cpp); the run time of F and G (medians) next to torch eager (F under no_grad; G as
forward + autograd.grad), and the largest differences from torch's values.

--model scan builds lstm_scan.py's objective instead (the loop over the sequence written with torch's scan, kept
as one node by torch.export); torch's times and values are still those of lstm_model's eager objective.
--clock cpu gives the build stages (export_s .. build_s) in CPU seconds of the process and the processes it
waited for (g++), which a loaded machine changes less than wall time; the run times of F and G stay wall time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


MODELS = {"loop": "lstm_model", "scan": "lstm_scan"}


def manifest(folder: Path, c: int, model: str = "loop") -> Path:
    name = MODELS[model]
    (folder / "model.py").write_text(
        f"import sys\nsys.path.insert(0, {str(HERE)!r})\nimport lstm_model\nimport {name}\n\n\n"
        f"def make():\n    return {name}.LSTMObjective(), lstm_model.inputs({c})\n")
    path = folder / "manifest.toml"
    path.write_text('[package]\nname = "lstm_export"\n\n[kernels.lstm]\ntorch = "model.py:make"\n\n'
                    '[exports]\nF = "lstm"\nG = "grad(lstm, argnums=(0, 1))"\n')
    return path


def median_time(fn, repeat: int = 5, min_s: float = 0.05) -> float:
    times = []
    for _ in range(repeat):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            if time.perf_counter() - t0 > min_s:
                break
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def clock(kind: str):
    """The stage clock: wall time, or CPU seconds of this process and its waited-for children (g++)."""
    if kind == "wall":
        return time.perf_counter
    return lambda: sum(os.times()[:4])


def one_size(c: int, model: str = "loop", kind: str = "wall") -> dict:
    """Build and time one sequence length (runs in its own process)."""
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    import lstm_model

    from ksbuild.frontends.torch_export.capture import capture
    from ksbuild.frontends.torch_export.importer import Importer
    try:
        from ksbuild.transforms.reroll import reroll
    except ImportError:  # (ksbuild before the reroll pass)
        reroll = None
    from ksbuild.packaging.package import package
    from ksbuild.packaging.runtime import Package
    from ksbuild.transforms.pipeline import lower
    from ksbuild.transforms.vjp import grad_func

    folder = Path(tempfile.mkdtemp(prefix=f"lstm{c}-"))
    path = manifest(folder, c, model)
    row: dict = {"c": c}
    now = clock(kind)
    t0 = now()
    captured = capture("model.py", folder, "make", None)
    row["export_s"] = now() - t0
    f = Importer(captured).run("lstm")
    f = reroll(f) if reroll else f
    row["front_s"] = now() - t0
    row["eqns"] = len(f.eqns)
    _show(row)
    t0 = now()
    lower(f)
    lower(grad_func(f, argnums=(0, 1)))
    row["pipeline_s"] = now() - t0
    _show(row)
    marks = {}

    def progress(line: str) -> None:
        marks.setdefault(line.split(" ")[1] if line.startswith("ksbuild: ") else line, now())

    t0 = now()
    root = package(path, folder / "dist", python_module=True, progress=progress, here=True)
    row["build_s"] = now() - t0
    row["compile_s"] = now() - marks.get("building", t0)
    row["lines"] = sum(len(p.read_text().splitlines()) for p in (root / "share").rglob("*.cpp"))
    _show(row)
    pkg = Package(root)
    args = lstm_model.inputs(c)
    nps = [a.numpy() for a in args]
    want = lstm_model.LSTMObjective()(*args)
    ps = [a.clone().requires_grad_(True) for a in args[:2]]
    want_g = torch.autograd.grad(lstm_model.LSTMObjective()(*ps, *args[2:]), ps)
    got = pkg.F(*nps)
    got_g = pkg.G(*nps)
    row["F_err"] = float(abs(got - want.item()))
    row["G_err"] = max(float(np.max(np.abs(g - w.numpy()))) for g, w in zip(got_g, want_g))
    row["F_s"] = median_time(lambda: pkg.F(*nps))
    row["G_s"] = median_time(lambda: pkg.G(*nps))
    with torch.no_grad():
        row["torch_F_s"] = median_time(lambda: lstm_model.LSTMObjective()(*args))

    def torch_grad():
        qs = [a.clone().requires_grad_(True) for a in args[:2]]
        torch.autograd.grad(lstm_model.LSTMObjective()(*qs, *args[2:]), qs)

    row["torch_G_s"] = median_time(torch_grad)
    return row


def _show(row: dict) -> None:
    """The stages measured so far (the last line printed is the row: a size stopped by --timeout shows them)."""
    print(json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16,64,256,1024")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--model", choices=sorted(MODELS), default="loop")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        _show(one_size(a.one, a.model, a.clock))
        return
    cols = ["c", "eqns", "export_s", "front_s", "pipeline_s", "compile_s", "build_s", "lines", "F_s", "torch_F_s",
            "G_s", "torch_G_s", "F_err", "G_err"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for c in (int(s) for s in a.sizes.split(",")):
        t0 = time.perf_counter()
        note = ""
        try:
            out = subprocess.run([sys.executable, __file__, "--one", str(c), "--model", a.model, "--clock", a.clock],
                                 capture_output=True, text=True,
                                 timeout=a.timeout, env=os.environ)
            text = out.stdout
            if out.returncode:
                note = f"failed after {time.perf_counter() - t0:.0f} s: {out.stderr.strip().splitlines()[-1:]}"
        except subprocess.TimeoutExpired as e:
            text = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            note = f"stopped after {a.timeout:.0f} s"
        lines = text.strip().splitlines()
        row = json.loads(lines[-1]) if lines else {"c": c}
        print("| " + " | ".join(_cell(row.get(k, "-")) for k in cols) + f" | {note}", flush=True)


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


if __name__ == "__main__":
    main()
