"""Real networks, end to end: what a user of each pays and gets from ksbuild, in one table.

    python benchmarks/models/bench.py [--models resnet18 mobilenet_v2] [--side 224] [--batches 1 8]
                                      [--repeats 10] [--budget 3] [--clock wall|cpu]
                                      [--frontend onnx|torch_export|both]

For each network (benchmarks/onnx/resnet.py's and mobilenets.py's: resnet18, mobilenet_v2, mobilenet_v3_small,
efficientnet_b0, written after torchvision's layouts, random weights, nothing downloaded; lstm_text, an embedding
and a 2-layer torch.nn.LSTM on 64 tokens; and, when transformers is installed (pip install -e ".[models]"),
bert_small and gpt2_small, transformers' BertModel and GPT2Model with 4 layers of 512, 8 heads, on 128 tokens),
exported with torch.onnx.export (gpt2_small through torch.export, dynamo=True): the time `ksbuild package` takes
(the portable x86-64 build: three instruction set levels; the kernel layer comes from ksbuild's cache, compiled once
before the first model and timed apart), the library's code, read-only data and weights (share/P/P.json's
footprint), the most stack one call uses (measured at build time from GCC's call graphs), the workspace of one
call, and the time of one inference against onnxruntime (1 thread, sequential), ExecuTorch with its XNNPACK
delegate (executorch_run.py, in the venv scripts/install_executorch.sh makes; "n/a" without it) and torch eager
(1 thread, no_grad), with memcpy of the weights' bytes as the physical limit of a batch-1 network. Times are medians
of samples taken in turn (bench.median_times; ExecuTorch's in its own process, after the others), wall clock or
(--clock cpu) the process's CPU time; ratios < 1 mean ksbuild is faster. Outputs are checked against onnxruntime
first (ExecuTorch's against torch eager's). A network whose build fails gets a "failed" row and ksbuild's message
on stderr; the others still run.

--frontend torch_export builds ksbuild's package through its torch.export frontend (a `torch =` kernel whose make()
builds the same module, batch symbolic) instead of from the ONNX file; --frontend both builds both and adds columns:
the torch.export package's build seconds and time, sampled in turn with the others, and its time over the ONNX
package's (issue 36: one network, one code, the same speed within 5%).

--threads N builds with `[build] threads = N` (ks/pool.h's threads) and gives every contender N threads: onnxruntime's
intra_op_num_threads, ExecuTorch's thread pool, torch.set_num_threads; it needs the wall clock (CPU time adds the
threads up).
"""
from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # (before numpy loads its BLAS)

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "onnx"))
# (benchmarks/onnx/bench.py by path, under a name of its own: another `bench` may be imported already, e.g.
# benchmarks/gradbench's in the tests that share a worker)
_spec = importlib.util.spec_from_file_location("onnx_bench", HERE.parent / "onnx" / "bench.py")
_onnx_bench = sys.modules.get("onnx_bench") or importlib.util.module_from_spec(_spec)
if "onnx_bench" not in sys.modules:
    sys.modules["onnx_bench"] = _onnx_bench
    _spec.loader.exec_module(_onnx_bench)
eager, median_times, one_thread_options = _onnx_bench.eager, _onnx_bench.median_times, _onnx_bench.one_thread_options
from mobilenets import MODELS as MOBILE  # noqa: E402
from resnet import MODELS  # noqa: E402


def bert_small():
    """transformers' BertModel in a BERT-small configuration (4 layers, hidden 512, 8 heads), random weights, its
    last hidden state as the output."""
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048)

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = transformers.BertModel(cfg).eval()

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state
    return Hidden().eval()


def gpt2_small():
    """transformers' GPT2Model in the configuration of bert_small (4 layers, hidden 512, 8 heads, 128 positions),
    no key/value cache, random weights, its last hidden state as the output."""
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=512, n_layer=4, n_head=8, n_positions=128, use_cache=False)

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = transformers.GPT2Model(cfg).eval()

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).last_hidden_state
    return Hidden().eval()


def lstm_text():
    """A text classifier: a 10000-word embedding of 128, a 2-layer LSTM of 256 (torch.nn.LSTM, batch first), a
    linear layer of the last step's hidden state to 2 classes; 64 tokens in."""
    import torch
    from torch import nn
    torch.manual_seed(0)

    class LSTMText(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10000, 128)
            self.lstm = nn.LSTM(128, 256, num_layers=2, batch_first=True)
            self.fc = nn.Linear(256, 2)

        def forward(self, ids):
            out, _ = self.lstm(self.embed(ids))
            return self.fc(out[:, -1])
    return LSTMText().eval()


def tokens(length: int):
    """Example ids for a batch: length int64 tokens below 1000 each."""
    return lambda batch: np.random.default_rng(batch).integers(0, 1000, (batch, length))


# networks torch.onnx.export's TorchScript path cannot export (GPT-2: `aten::diff` in transformers 5's mask code)
DYNAMO = {"gpt2_small"}


def networks(side: int) -> dict:
    """name -> (module factory, example input as a numpy array for a batch): the images, the LSTM and, if it
    imports, BERT and GPT-2."""
    nets = {name: (build, lambda batch: np.random.default_rng(batch).standard_normal((batch, 3, side, side))
                   .astype(np.float32)) for name, (build, _) in {**MODELS, **MOBILE}.items()}
    nets["lstm_text"] = (lstm_text, tokens(64))
    try:
        import transformers  # noqa: F401
        nets["bert_small"] = (bert_small, tokens(128))
        nets["gpt2_small"] = (gpt2_small, tokens(128))
    except ImportError:
        pass
    return nets

WARMUP_MANIFEST = """[package]
name = "kernel_layer_warmup{n}"

[kernels.k]
onnx = "warmup.onnx"

[exports]
k = "k"
"""


def ksbuild_cli() -> list[str]:
    """The ksbuild command of this Python."""
    return [sys.executable, "-m", "ksbuild"]


def package(manifest: Path, out: Path, env: dict) -> float:
    """Seconds `ksbuild package` takes (a failure stops the benchmark with ksbuild's message)."""
    start = time.perf_counter()
    proc = subprocess.run([*ksbuild_cli(), "-q", "package", str(manifest), "-o", str(out)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return time.perf_counter() - start


def warm_kernel_layer(folder: Path, env: dict) -> float:
    """Build a package of a convolution and a product first, twice: the compile of the kernel layer's two float parts
    (convs, products) and of the precompiled prelude (once per compiler and flags; a cache compiles the prelude header
    for its second package: CMakeLists.txt)."""
    import torch
    path = folder / "warmup.onnx"
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4))
    torch.onnx.export(net, (torch.zeros(1, 3, 8, 8),), str(path), dynamo=False)
    seconds = 0.0
    for n in (1, 2):
        (folder / f"warmup{n}.toml").write_text(WARMUP_MANIFEST.format(n=n))
        seconds += package(folder / f"warmup{n}.toml", folder / f"warmup{n}", env)
    return seconds


def export_onnx(model, path: Path, example, dynamo: bool = False) -> None:
    """The network as ONNX with a symbolic batch (dynamo: through torch.export, torch.onnx.export(dynamo=True))."""
    import torch
    x = torch.from_numpy(example)
    if dynamo:
        batch = torch.export.Dim("batch", min=1, max=1024)
        torch.onnx.export(model, (x,), str(path), dynamo=True, input_names=["x"], output_names=["y"],
                          dynamic_shapes=({0: batch},), external_data=False)
        return
    torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


TORCH_EXPORT_MAKE = """import sys

sys.path[:0] = [{models!r}, {onnx!r}]


def make():
    \"\"\"benchmarks/models/bench.py's {name}, its example at batch 2 with the batch a torch.export Dim.\"\"\"
    import numpy as np
    import torch

    import bench
    build, example = bench.networks({side})["{name}"]
    x = torch.from_numpy(np.ascontiguousarray(example(2)))
    return build(), (x,), ({{0: torch.export.Dim("batch", min=1, max=1024)}},)
"""


def manifest(folder: Path, package_name: str, kernel: str, threads: int) -> Path:
    """A manifest of one export `net` of the kernel line given (onnx = ... or torch = ...)."""
    path = folder / f"{package_name}.toml"
    build = f"[build]\nthreads = {threads}\n\n" if threads > 1 else ""
    path.write_text(f'[package]\nname = "{package_name}"\n\n{build}[kernels.net]\n{kernel}\n\n[exports]\nnet = "net"\n')
    return path


def torch_export_manifest(folder: Path, name: str, side: int, threads: int) -> Path:
    """The manifest of the network built through ksbuild's torch.export frontend (package `<name>_te`)."""
    (folder / f"{name}_te.py").write_text(TORCH_EXPORT_MAKE.format(models=str(HERE), onnx=str(HERE.parent / "onnx"),
                                                                    name=name, side=side))
    return manifest(folder, f"{name}_te", f'torch = "{name}_te.py:make"', threads)


EXECUTORCH_PYTHON = HERE.parent.parent / ".venv-executorch" / "bin" / "python"
NO_EXECUTORCH = "n/a (run scripts/install_executorch.sh)"


def executorch(model, x: np.ndarray, folder: Path, threads: int, repeats: int, budget: float, clock: str,
               python: Path | None = None) -> dict | None:
    """ExecuTorch + XNNPACK on model(x): executorch_run.py's figures (ms, calling_thread_share, pte_bytes,
    delegates) and its output as "y", run by the python of scripts/install_executorch.sh's venv on the program
    torch.export makes of model here; None when that venv is absent. A failure raises RuntimeError with its
    message."""
    python = python or EXECUTORCH_PYTHON
    if not python.exists():
        return None
    import torch
    program, xs, ys = folder / "program.pt2", folder / "x.npy", folder / "y.npy"
    torch.export.save(torch.export.export(model, (torch.from_numpy(x),)), str(program))
    np.save(xs, x)
    proc = subprocess.run([str(python), str(HERE / "executorch_run.py"), str(program), str(xs), str(ys),
                           "--threads", str(threads), "--repeats", str(repeats), "--budget", str(budget),
                           "--clock", clock], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"executorch_run.py failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), y=np.load(ys))


def footprint(tree: Path, name: str) -> tuple[dict, int | None]:
    """The install tree's section sizes and the export's stack figure (share/P/P.json)."""
    info = json.loads((tree / "share" / name / f"{name}.json").read_text())
    return info.get("footprint", {}), info["exports"]["net"].get("stack_bytes")


def executorch_columns(name: str, model, x: np.ndarray, expected: np.ndarray, t_ks: float, folder: Path,
                       a) -> tuple[str, str, str]:
    """The ExecuTorch, ksbuild / ET and ET err cells of a row (ET err: the largest difference from torch eager's
    output); "n/a" without the venv, "failed" when ExecuTorch fails (its message and its figures on stderr)."""
    try:
        run = executorch(model, x, folder, a.threads, a.repeats, a.budget, a.clock)
    except RuntimeError as failure:
        print(f"{name}: ExecuTorch failed: {failure}", file=sys.stderr, flush=True)
        return "failed", "", ""
    if run is None:
        return NO_EXECUTORCH, "", ""
    print(f"{name}, batch {len(x)}: ExecuTorch ran {run['delegates']} XNNPACK subgraph(s), .pte "
          f"{run['pte_bytes'] / 2 ** 20:.1f} MB, {run['threads']} thread(s), the calling thread's share of its CPU "
          f"time {run['calling_thread_share']:.2f}", file=sys.stderr, flush=True)
    t_et = run["ms"] / 1e3
    return f"{1e3 * t_et:.2f}", f"{t_ks / t_et:.2f}", f"{float(np.abs(run['y'] - expected).max()):.1e}"



def scratch_folder(prefix: str) -> Path:
    """A temporary folder for a run's ONNX files, packages and cache (about 0.5 GB for the four networks), removed
    when the process exits unless KSBUILD_BENCH_KEEP is set (then its path is printed on stderr)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if os.environ.get("KSBUILD_BENCH_KEEP"):
        print(f"(kept: {folder})", file=sys.stderr)
    else:
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=None,
                   help="resnet18, mobilenet_v2, mobilenet_v3_small, efficientnet_b0, lstm_text, bert_small, "
                        "gpt2_small (default: all)")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: the process's CPU time (time.process_time), less sensitive to a loaded machine")
    p.add_argument("--side", type=int, default=224)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--budget", type=float, default=3.0)
    p.add_argument("--threads", type=int, default=1,
                   help="N > 1: [build] threads = N, onnxruntime's intra_op_num_threads = N, ExecuTorch's and "
                        "torch's N threads (wall clock only)")
    p.add_argument("--frontend", choices=["onnx", "torch_export", "both"], default="onnx",
                   help="how ksbuild gets the network: the ONNX file, its torch.export frontend, or both (extra "
                        "columns: the torch.export build and its time over the ONNX build's)")
    a = p.parse_args(argv)
    if a.threads > 1 and a.clock == "cpu":
        p.error("--threads > 1 needs --clock wall: the process's CPU time adds up the time of its threads")
    import onnxruntime as ort
    import torch

    import ksbuild
    torch.set_num_threads(a.threads)
    folder = scratch_folder("ksbuild-models-")
    env = dict(os.environ, KSBUILD_CACHE=str(folder / "cache"))
    os.environ["KSBUILD_CACHE"] = env["KSBUILD_CACHE"]  # (ksbuild.build below: the same cache)
    warm = warm_kernel_layer(folder, env)
    opts = one_thread_options()
    opts.intra_op_num_threads = a.threads
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    print(f"# Networks ({platform.processor() or platform.machine()}, {a.threads} thread(s), {a.side}x{a.side}, "
          f"median of {a.repeats}; times in ms, {a.clock} clock; load average {os.getloadavg()[0]:.1f})\n\n"
          "The kernel layer and the precompiled prelude compiled once (three levels, empty cache; two small "
          f"packages): {warm:.1f} s\n")
    sequential = " | ksbuild 1 thread | onnxruntime 1 thread" if a.threads > 1 else ""
    sequential += " | build s torch.export | ksbuild torch.export | torch.export / onnx | te err" \
        if a.frontend == "both" else ""
    print("| network | build s | code KB | weights MB | stack B | workspace KB | batch | ksbuild | onnxruntime | "
          f"ExecuTorch | torch eager | memcpy weights | ksbuild / ort | ksbuild / ET | ksbuild / eager | max err | "
          f"ET err{sequential} |")
    print("|---|" + "---:|" * (16 + 2 * (a.threads > 1) + 4 * (a.frontend == "both")))
    if a.frontend == "torch_export":
        print("(ksbuild's package built through its torch.export frontend)\n")
    nets = networks(a.side)
    failed = []
    for name in a.models or sorted(nets):
        build, example = nets[name]
        model = build()
        path = folder / f"{name}.onnx"
        dynamo = name in DYNAMO
        export_onnx(model, path, example(2 if dynamo else 1), dynamo)  # (torch.export specializes a dim of 1)
        te = torch_export_manifest(folder, name, a.side, a.threads) if a.frontend != "onnx" else None
        main_manifest = te if a.frontend == "torch_export" else \
            manifest(folder, name, f'onnx = "{path.name}"', a.threads)
        if a.threads > 1:  # (the same network on one thread, timed in the same samples)
            manifest(folder, f"{name}_1", f'onnx = "{path.name}"', 1)
        try:
            seconds = package(main_manifest, folder / main_manifest.stem, env)
            te_seconds = package(te, folder / te.stem, env) if a.frontend == "both" else None
        except SystemExit as failure:  # the other networks still run; ksbuild's message on stderr
            print(f"| {name} | failed: see stderr |", flush=True)
            print(f"{name}: ksbuild package failed ({path}):\n{failure.code}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        sizes, stack = footprint(folder / main_manifest.stem, main_manifest.stem)
        pkg = ksbuild.build(main_manifest, portable=True)
        pkg_te = ksbuild.build(te, portable=True) if a.frontend == "both" else None
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        if a.threads > 1:
            pkg1 = ksbuild.build(folder / f"{name}_1.toml", portable=True)
            sess1 = ort.InferenceSession(str(path), one_thread_options(), providers=["CPUExecutionProvider"])
        weights = sizes.get("weights", 0)
        src = np.ones(max(weights // 4, 1), np.float32)
        dst = np.empty_like(src)
        for batch in a.batches:
            x = example(batch)
            xt = torch.from_numpy(x)
            err = float(np.abs(pkg.net(x) - sess.run(None, {"x": x})[0]).max())
            workspace = pkg.net.ws_fn(batch) if hasattr(pkg.net, "ws_fn") else None
            fns = [lambda: pkg.net(x), lambda: sess.run(None, {"x": x}), lambda: eager(model, xt),
                   lambda: np.copyto(dst, src)]
            if a.threads > 1:
                fns += [lambda: pkg1.net(x), lambda: sess1.run(None, {"x": x})]
            if pkg_te is not None:
                fns += [lambda: pkg_te.net(x)]
            t_ks, t_ort, t_eager, t_copy, *t_one = median_times(fns, a.repeats, a.budget, clock=clock)
            extra = "".join(f" {1e3 * t:.2f} |" for t in t_one[:2 * (a.threads > 1)])
            if pkg_te is not None:
                te_err = float(np.abs(pkg_te.net(x) - pkg.net(x)).max())
                extra += f" {te_seconds:.1f} | {1e3 * t_one[-1]:.2f} | {t_one[-1] / t_ks:.3f} | {te_err:.1e} |"
            et, et_ratio, et_err = executorch_columns(name, model, x, eager(model, xt).numpy(), t_ks, folder, a)
            ws = f"{workspace / 1024:.0f}" if workspace is not None else "?"
            print(f"| {name} | {seconds:.1f} | {sizes.get('text', 0) / 1024:.0f} | {weights / 2 ** 20:.1f} | "
                  f"{stack if stack is not None else '?'} | {ws} | {batch} | {1e3 * t_ks:.2f} | {1e3 * t_ort:.2f} | "
                  f"{et} | {1e3 * t_eager:.2f} | {1e3 * t_copy:.2f} | {t_ks / t_ort:.2f} | {et_ratio} | "
                  f"{t_ks / t_eager:.2f} | {err:.1e} | {et_err} |" + extra,
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
