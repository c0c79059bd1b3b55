"""ExecuTorch + XNNPACK on one exported network: the ExecuTorch column of benchmarks/models/bench.py.

    .venv-executorch/bin/python benchmarks/models/executorch_run.py PROGRAM.pt2 X.npy Y.npy [--threads 1]
                                                                   [--repeats 10] [--budget 3] [--clock wall|cpu]

Runs in the venv scripts/install_executorch.sh makes (bench.py starts it as a subprocess): loads the ExportedProgram
bench.py saved with torch.export.save (the same torch module, the same torch), lowers it with the XNNPACK partitioner
(executorch.exir.to_edge_transform_and_lower, fp32, no quantization) to a .pte, loads that with executorch.runtime,
sets ExecuTorch's thread pool (which XNNPACK's operators run on) to --threads threads, runs it on X.npy, writes the
output to Y.npy and prints one JSON line: the median time of one call (bench.median_times, the same method as
bench.py's other columns, but not interleaved with them), how much of the process's CPU time the calling thread
spent (1.0 when nothing ran on other threads), the .pte's size and the number of XNNPACK-delegated subgraphs.

--profile OUT.json instead: XNNPACK's own per-operator times (ExecuTorch's ETDump event tracer, `--repeats` calls
after 5 warm-up calls, executorch.devtools.Inspector): a JSON list of [operator name, median ms] in execution order
(benchmarks/models/executorch_layers.py reads it).
"""
from __future__ import annotations

import argparse
import atexit
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "onnx"))
from bench import median_times  # noqa: E402  (benchmarks/onnx/bench.py)


def lowered(pt2: Path, folder: Path) -> tuple[Path, int]:
    """The .pte of the ExportedProgram in pt2, XNNPACK-delegated where it can be, and the count of delegated
    subgraphs."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    edge = to_edge_transform_and_lower(torch.export.load(str(pt2)), partitioner=[XnnpackPartitioner()])
    delegates = sum(1 for n in edge.exported_program().graph.nodes if n.op == "call_function"
                    and "executorch_call_delegate" in str(n.target))
    path = folder / "program.pte"
    path.write_bytes(edge.to_executorch().buffer)
    return path, delegates


def profile(pte: Path, a) -> int:
    """XNNPACK's per-operator median times over a.repeats calls (--profile)."""
    import torch
    from executorch.devtools import Inspector
    from executorch.extension.pybindings.portable_lib import _load_for_executorch
    module = _load_for_executorch(str(pte), enable_etdump=True, debug_buffer_size=0)
    x = torch.from_numpy(np.load(a.x))
    for _ in range(5):
        module.forward((x,))
    dump = pte.with_suffix(".etdp")
    module = _load_for_executorch(str(pte), enable_etdump=True, debug_buffer_size=0)
    for _ in range(a.repeats):
        y = module.forward((x,))[0]
    module.write_etdump_result_to_file(str(dump))
    np.save(a.y, y.numpy())
    frame = Inspector(etdump_path=str(dump)).to_dataframe()
    rows = [[str(r["event_name"]), float(r["p50 (ms)"])] for _, r in frame.iterrows()
            if r["event_block_name"] == "Execute" and r["event_name"] not in ("DELEGATE_CALL", "Method::execute")]
    a.profile.write_text(json.dumps(rows))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("program", type=Path)
    p.add_argument("x", type=Path)
    p.add_argument("y", type=Path)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--budget", type=float, default=3.0)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    p.add_argument("--profile", type=Path)
    a = p.parse_args(argv)
    import torch
    from executorch.extension.pybindings.portable_lib import _threadpool_get_thread_count, _unsafe_reset_threadpool
    from executorch.runtime import Runtime
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="ksbuild-executorch-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # (the lowered program: only its time is kept)
    pte, delegates = lowered(a.program, folder)
    _unsafe_reset_threadpool(a.threads)
    if a.profile:
        return profile(pte, a)
    method = Runtime.get().load_program(pte).load_method("forward")
    x = torch.from_numpy(np.load(a.x))
    np.save(a.y, method.execute((x,))[0].numpy())
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    own, total = time.thread_time(), time.process_time()
    (seconds,) = median_times([lambda: method.execute((x,))], a.repeats, a.budget, clock=clock)
    share = (time.thread_time() - own) / max(time.process_time() - total, 1e-9)
    print(json.dumps({"ms": 1e3 * seconds, "threads": _threadpool_get_thread_count(), "calling_thread_share": share,
                      "pte_bytes": pte.stat().st_size, "delegates": delegates}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
