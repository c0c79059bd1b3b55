"""How a network's work splits over threads: ksbuild with `[build] threads = N` and onnxruntime with
intra_op_num_threads = N, against their one-thread selves, in CPU time (so a loaded machine changes little).

    python benchmarks/models/thread_split.py [--models resnet18 mobilenet_v2] [--threads 2] [--batches 1 8] [--calls 24]

For each network of bench.py and batch: the process's CPU time per call and the calling thread's own (time.thread_time)
for each contender on one thread and on N. The work on other threads is their difference; with N threads a call can
take no less wall time than its calling thread's CPU time, so "calling thread / one thread" bounds the speed-up from
below: 1.0 means nothing ran in parallel. OpenMP's and onnxruntime's idle threads would spin while they wait for work
(and count as CPU time): OMP_WAIT_POLICY=passive and onnxruntime's session.intra_op.allow_spinning = 0 keep them
asleep here (bench.py --threads times them with their default, spinning, setting).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

os.environ["OMP_WAIT_POLICY"] = "passive"  # (before libgomp loads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# bench.py by path, under a name of its own (benchmarks/onnx/bench.py, which it imports, is `bench`)
_spec = importlib.util.spec_from_file_location("models_bench", Path(__file__).resolve().parent / "bench.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def cpu_split(fn, calls: int) -> tuple[float, float]:
    """(process CPU seconds, calling thread's CPU seconds) per call of fn, after one call to warm up."""
    fn()
    own, total = time.thread_time(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - total) / calls, (time.thread_time() - own) / calls


def contenders(name: str, path: Path, folder: Path, threads: int) -> dict:
    """name of contender -> a function of x running the network: ksbuild and onnxruntime on 1 and on threads."""
    import onnxruntime as ort

    import ksbuild
    fns = {}
    for n in (1, threads):
        build = f"[build]\nthreads = {n}\n\n" if n > 1 else ""
        manifest = folder / f"{name}_{n}.toml"
        manifest.write_text(f'[package]\nname = "{name}_{n}"\n\n{build}[kernels.net]\nonnx = "{path.name}"\n\n'
                            '[exports]\nnet = "net"\n')
        pkg = ksbuild.build(manifest, portable=True)
        opts = bench.one_thread_options()
        opts.intra_op_num_threads = n
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        fns[f"ksbuild {n}"] = pkg.net
        fns[f"onnxruntime {n}"] = lambda x, sess=sess: sess.run(None, {"x": x})[0]
    return fns


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--calls", type=int, default=24, help="calls at batch 1 (divided by the batch above it)")
    a = p.parse_args(argv)
    folder = bench.scratch_folder("ksbuild-thread-split-")
    nets = bench.networks(224)
    print(f"| network | batch | contender | CPU ms, 1 thread | CPU ms, {a.threads} threads | calling thread's | "
          "calling thread / 1 thread |\n|---|---:|---|---:|---:|---:|---:|")
    for name in a.models:
        build, example = nets[name]
        path = folder / f"{name}.onnx"
        bench.export_onnx(build(), path, example(1))
        fns = contenders(name, path, folder, a.threads)
        for batch in a.batches:
            x = example(batch)
            calls = max(2, a.calls // batch)
            for who in ("ksbuild", "onnxruntime"):
                one, _ = cpu_split(lambda: fns[f"{who} 1"](x), calls)
                total, own = cpu_split(lambda: fns[f"{who} {a.threads}"](x), calls)
                print(f"| {name} | {batch} | {who} | {1e3 * one:.2f} | {1e3 * total:.2f} | {1e3 * own:.2f} | "
                      f"{own / one:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
