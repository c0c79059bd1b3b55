"""ONNX benchmark: inference of an MLP and a CNN compiled by ksbuild (plain and blas backends)
against onnxruntime with one thread, and the gradient of their training loss against torch eager.

    python benchmarks/onnx/bench.py [--quick] [--repeats 20] [--budget 3]

The models are torch modules exported here with torch.onnx.export (nothing downloaded):
- mlp: 784 -> 512 -> 512 -> 10 (ReLU), batch 64;
- cnn: conv 3->32 3x3 pad 1, ReLU, maxpool 2, conv 32->64 3x3 pad 1, ReLU, maxpool 2, linear 4096 -> 10,
  images [16, 3, 32, 32].
Each model is built four ways: backend plain (portable loops and ks/gemm.h's register tiles,
runtime-free) and blas (CBLAS), each for the portable baseline (SSE2) and with cpu = "native".
Inference at batch 1 and at the batch above (the batch dim is symbolic: one build serves both):
the same float32 inputs go to every contender (onnxruntime, torch eager under no_grad, torch.compile of
the module in its default mode, warmed up first, compile time not counted; "n/a" if it fails); outputs
are compared first (max abs error vs onnxruntime). Gradient: d loss / d every weight of mean((model(x) - y)²), ksbuild's
grad(loss, argnums=weights) of the exported loss (weights = "external") vs torch eager (forward +
backward); both float32 results are compared with torch in float64 (max error relative to the
largest gradient entry). Threads: onnxruntime intra/inter-op 1,
torch.set_num_threads(1), OPENBLAS_NUM_THREADS=1. Each time is the MEDIAN of --repeats samples
of calls from Python (ctypes for ksbuild, session.run for onnxruntime): per-call overheads are
included for everyone. The contenders of a row are sampled in turn (round-robin), so that load from
other jobs on a shared machine slows them alike. Ratios > 1 mean ksbuild is faster.
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore")


def models():
    import torch

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 32, 3, padding=1)
            self.c2 = torch.nn.Conv2d(32, 64, 3, padding=1)
            self.fc = torch.nn.Linear(64 * 8 * 8, 10)

        def forward(self, x):
            x = torch.max_pool2d(torch.relu(self.c1(x)), 2)
            x = torch.max_pool2d(torch.relu(self.c2(x)), 2)
            return self.fc(torch.flatten(x, 1))

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                              torch.nn.Linear(512, 10))
    return {"mlp": (mlp.eval(), (64, 784)), "cnn": (CNN().eval(), (16, 3, 32, 32))}


class Loss:
    """mean((model(x) - y)²) as a module, for the gradient export."""

    def __new__(cls, model):
        import torch

        class L(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, x, y):
                return ((self.m(x) - y) ** 2).mean()
        return L()


def export(folder: Path) -> dict:
    import torch
    out = {}
    for name, (m, shape) in models().items():
        x = torch.randn(shape)
        torch.onnx.export(m, (x,), str(folder / f"{name}.onnx"), dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        y = torch.randn(m(x).shape)
        torch.onnx.export(Loss(m), (x, y), str(folder / f"{name}_loss.onnx"), dynamo=False,
                          input_names=["x", "y"], output_names=["loss"], do_constant_folding=False)
        out[name] = (m, shape, tuple(y.shape))
    return out


VARIANTS = {"plain": ("plain", ""), "plain native": ("plain", "native"), "blas": ("blas", ""),
            "blas native": ("blas", "native")}
"""The ksbuild builds compared: (backend, cpu). cpu = "native" compiles the C++ for this machine's instruction
set, as onnxruntime's kernels pick it at run time; "" is the portable baseline (SSE2 on x86-64)."""


def manifest(folder: Path, names, variant: str) -> Path:
    import onnx
    backend, cpu = VARIANTS[variant]
    tag = variant.replace(" ", "_")
    text = f'[package]\nname = "onnx_bench_{tag}"\n\n[build]\nbackend = "{backend}"\ncpu = "{cpu}"\n\n'
    exports = "[exports]\n"
    for n in names:
        n_w = sum(1 for _ in onnx.load(str(folder / f"{n}_loss.onnx")).graph.initializer)
        text += f'[kernels.{n}]\nonnx = "{n}.onnx"\n\n'
        text += f'[kernels.{n}_loss]\nonnx = "{n}_loss.onnx"\nweights = "external"\n\n'
        exports += f'{n} = "{n}"\n{n}_grad = "grad({n}_loss, argnums=({", ".join(str(2 + i) for i in range(n_w))}))"\n'
    path = folder / f"manifest_{tag}.toml"
    path.write_text(text + exports)
    return path


def one_thread_options():
    """onnxruntime's session options for one thread, operators run one after another (the contender's setting)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return opts


def eager(module, x):
    """module(x) without autograd's bookkeeping (inference)."""
    import torch
    with torch.no_grad():
        return module(x)


def torch_compiled(module, shape: tuple):
    """torch.compile(module) in its default mode, warmed up at batch 1 and shape[0] (compile time not counted), or
    the reason it failed (a string)."""
    import torch
    try:
        compiled = torch.compile(copy.deepcopy(module))
        for batch in (1, shape[0]):
            eager(compiled, torch.zeros((batch,) + tuple(shape[1:])))
        return compiled
    except Exception as e:  # noqa: BLE001 - anything torch.compile raises makes the column n/a
        return f"{type(e).__name__}"


def median_times(fns: list, repeats: int, budget: float, min_ms: float = 20.0, clock=time.perf_counter) -> list[float]:
    """The median time of one call of each fn. Samples are taken round-robin (one of each fn in turn), so
    that load from other jobs on a shared machine hits every contender alike; a sample is a loop of
    calls lasting about min_ms, timed by clock (time.process_time: CPU time, the time others' jobs take left out)."""
    loops = []
    for fn in fns:
        fn()
        t0 = time.perf_counter()
        fn()
        loops.append(max(1, int(min_ms / 1000 / max(time.perf_counter() - t0, 1e-7))))
    samples: list[list[float]] = [[] for _ in fns]
    start = time.perf_counter()
    while len(samples[0]) < repeats and (time.perf_counter() - start < budget * len(fns) or len(samples[0]) < 3):
        for fn, n, out in zip(fns, loops, samples):
            t = clock()
            for _ in range(n):
                fn()
            out.append((clock() - t) / n)
    return [float(np.median(s)) for s in samples]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--budget", type=float, default=3.0)
    p.add_argument("--quick", action="store_true", help="fewer samples")
    a = p.parse_args(argv)
    if a.quick:
        a.repeats, a.budget = 5, 1.0
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import numpy_helper

    import ksbuild
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    folder = Path(tempfile.mkdtemp(prefix="ksbuild-onnx-bench-"))
    specs = export(folder)
    pkgs = {v: ksbuild.build(manifest(folder, specs, v), backend=VARIANTS[v][0], portable=True) for v in VARIANTS}
    opts = one_thread_options()
    print(f"# ONNX benchmark ({platform.processor() or platform.machine()}, 1 thread, median of {a.repeats}; "
          "times in ms)\n")
    names = list(VARIANTS)
    print(f"| model | onnxruntime | torch eager | torch.compile | {' | '.join(names)} | "
          f"{' | '.join('ort / ' + v for v in names)} | max err |")
    print("|---|" + "---:|" * (2 * len(names) + 4))
    grad_rows = []
    for name, (m, shape, yshape) in specs.items():
        sess = ort.InferenceSession(str(folder / f"{name}.onnx"), opts, providers=["CPUExecutionProvider"])
        compiled = torch_compiled(m, shape)
        for batch in (1, shape[0]):  # the batch dim is symbolic: one build serves both
            x = rng.standard_normal((batch,) + shape[1:]).astype(np.float32)
            xt = torch.from_numpy(x)
            want = sess.run(None, {"x": x})[0]
            err = max(float(np.abs(getattr(pkgs[b], name)(x) - want).max()) for b in pkgs)
            torch_fns = [lambda: eager(m, xt)] + ([lambda: eager(compiled, xt)] if callable(compiled) else [])
            fns = [lambda: sess.run(None, {"x": x})] + torch_fns + [lambda b=b: getattr(pkgs[b], name)(x) for b in pkgs]
            times = median_times(fns, a.repeats, a.budget)
            t_ort, t_eager = times[0], times[1]
            t_compiled = f"{1e3 * times[2]:.3f}" if callable(compiled) else f"n/a ({compiled})"
            t = dict(zip(pkgs, times[len(torch_fns) + 1:]))
            print(f"| {name} {list(x.shape)} | {1e3 * t_ort:.3f} | {1e3 * t_eager:.3f} | {t_compiled} | "
                  f"{' | '.join(f'{1e3 * t[v]:.3f}' for v in names)} | "
                  f"{' | '.join(f'{t_ort / t[v]:.2f}' for v in names)} | {err:.1e} |")
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(yshape).astype(np.float32)
        weights = [numpy_helper.to_array(t) for t in onnx.load(str(folder / f"{name}_loss.onnx")).graph.initializer]
        loss = Loss(m)
        xt, yt = torch.tensor(x), torch.tensor(y)

        def torch_grad():
            loss.zero_grad()
            loss(xt, yt).backward()
            return [p.grad for p in loss.parameters()]

        ref = Loss(copy.deepcopy(m)).double()
        ref(torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)).backward()
        want_g = [p.grad.numpy() for p in ref.parameters()]
        got = {b: getattr(pkgs[b], f"{name}_grad")(x, y, *weights) for b in pkgs}
        g_err = max(float(np.abs(gg - w).max() / (np.abs(w).max() + 1e-12)) for b in got for gg, w in
                    zip(got[b], want_g))
        t_err = max(float(np.abs(gg.numpy() - w).max() / (np.abs(w).max() + 1e-12)) for gg, w in
                    zip(torch_grad(), want_g))
        fns = [torch_grad] + [lambda b=b: getattr(pkgs[b], f"{name}_grad")(x, y, *weights) for b in pkgs]
        t_torch, *rest = median_times(fns, a.repeats, a.budget)
        tg = dict(zip(pkgs, rest))
        grad_rows.append(f"| {name} {list(shape)} | {1e3 * t_torch:.3f} | "
                         f"{' | '.join(f'{1e3 * tg[v]:.3f}' for v in names)} | "
                         f"{' | '.join(f'{t_torch / tg[v]:.2f}' for v in names)} | {g_err:.1e} | {t_err:.1e} |")
    print("\nGradient of the training loss with respect to every weight (forward + backward):\n")
    print(f"| model | torch eager | {' | '.join(names)} | {' | '.join('torch / ' + v for v in names)} | err ksbuild | "
          "err torch |")
    print("|---|" + "---:|" * (2 * len(names) + 3))
    print("\n".join(grad_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
