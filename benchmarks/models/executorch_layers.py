"""Where ExecuTorch + XNNPACK beats ksbuild on a depthwise network at batch 1, by layer kind (issue 36; brief dw4).

    python benchmarks/models/executorch_layers.py CL_LAYERS[,CL_LAYERS_2] [NETWORK ...]      e.g.
    g++ -std=c++17 -O3 -march=x86-64-v4 -Iprelude benchmarks/models/channels_last_layers.cpp -o /tmp/cl_layers
    python benchmarks/models/executorch_layers.py /tmp/cl_layers mobilenet_v2 mobilenet_v3_small

For each network (bench.py's or heldout.py's), one image of 224 × 224: XNNPACK's own per-operator times inside
ExecuTorch (executorch_run.py --profile: the ETDump event tracer, median of RUNS calls, default 30; ExecuTorch's
venv as bench.py finds it), and each depthwise and 1 × 1 convolution timed alone by CL_LAYERS
(benchmarks/models/channels_last_layers.cpp's "old" column: the kernel ksbuild calls today, bias + ReLU6 in its
registers, thread CPU time, median of ROUNDS rounds, default 5; a second binary after a comma, e.g. one built from
an older checkout's prelude, gives a second ksbuild column, "old"). REPEATS (default 3) times in turn: every
network's ExecuTorch profile, then every layer by each binary; medians over the repeats. XNNPACK's convolution and
fully-connected operators are matched in order with the ONNX export's Conv and Gemm nodes (the same torch module;
XNNPACK runs a 1 × 1 convolution as a fully-connected operator over the NHWC positions). Printed per network: per
layer kind the sums (ksbuild's kernels, XNNPACK's operators, their ratio) and the depthwise and 1 × 1 layers one by
one. The stem, the squeeze-excite FCs, the classifier and the elementwise operators have XNNPACK times only
(ksbuild's are in its whole-network time: bench.py); activations other than ReLU6 (hardswish) are in XNNPACK's
operators but not in the kernels' times here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import EXECUTORCH_PYTHON  # noqa: E402
from depthwise_layers import conv_layers, kernel_times, network  # noqa: E402


def kind(spec: str | None, what: str, first: bool) -> str:
    """A layer's kind: the stem, depthwise K × K sS, 1 × 1 expand / project, squeeze-excite, classifier."""
    if spec and spec.startswith("dw:"):
        k, s = spec.split(":")[1:3]
        return f"depthwise {k}x{k} s{s}"
    if spec and spec.startswith("pw:"):
        cin, cout = (int(v) for v in spec.split(":")[1:3])
        return "1x1 expand" if cout > cin else "1x1 project"
    if what == "classifier":
        return "classifier"
    return "stem" if first else ("squeeze-excite" if what.endswith(" 1²") else "other conv")


def ordered_layers(path: Path) -> list:
    """(kind, spec, description) of the ONNX Conv and Gemm nodes in graph order."""
    import onnx
    convs, out = conv_layers(path), []
    for node in onnx.load(str(path)).graph.node:
        if node.op_type == "Conv" and node.name in convs:
            _, spec, what, _ = convs[node.name]
            out.append((kind(spec, what, not out), spec, what))
        elif node.op_type in ("Gemm", "MatMul"):
            out.append(("classifier", None, "classifier"))
    return out


def executorch_profile(program: Path, x: Path, runs: int) -> list:
    out = program.with_suffix(".json")
    subprocess.run([str(EXECUTORCH_PYTHON), str(HERE / "executorch_run.py"), str(program), str(x),
                    str(program.with_suffix(".y.npy")), "--repeats", str(runs), "--profile", str(out)], check=True,
                   capture_output=True, text=True)
    return json.loads(out.read_text())


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    import torch
    cls, names = sys.argv[1].split(","), sys.argv[2:] or ["mobilenet_v2", "mobilenet_v3_small"]
    runs, repeats = int(os.environ.get("RUNS", "30")), int(os.environ.get("REPEATS", "3"))
    folder = Path(tempfile.mkdtemp(prefix="executorch_layers-"))
    print(f"load average {os.getloadavg()[0]:.1f}")
    layers = {}
    x = torch.randn(1, 3, 224, 224)
    np.save(folder / "x.npy", x.numpy())
    for name in names:
        module = network(name).eval()
        torch.onnx.export(module, (x,), str(folder / f"{name}.onnx"), dynamo=False, input_names=["x"],
                          output_names=["y"])
        torch.export.save(torch.export.export(module, (x,)), str(folder / f"{name}.pt2"))
        layers[name] = ordered_layers(folder / f"{name}.onnx")
    specs = sorted({spec for net in layers.values() for _, spec, _ in net if spec})
    profiles, kernels = defaultdict(list), [[] for _ in cls]
    for _ in range(repeats):
        for name in names:
            profiles[name].append(executorch_profile(folder / f"{name}.pt2", folder / "x.npy", runs))
        for cl, times in zip(cls, kernels):
            times.append(kernel_times(cl, specs))
    ks = {spec: float(np.median([k[spec][0] for k in kernels[0]])) for spec in specs}
    old = {spec: float(np.median([k[spec][0] for k in kernels[-1]])) for spec in specs}
    two = len(cls) > 1
    for name in names:
        ops = [(op, 1e3 * float(np.median([p[i][1] for p in profiles[name]])))
               for i, (op, _) in enumerate(profiles[name][0])]
        convs = [(op, t) for op, t in ops if op.startswith(("Convolution", "Fully Connected"))]
        if len(convs) != len(layers[name]):
            print(f"\n## {name}: {len(convs)} XNNPACK convolution / FC operators for {len(layers[name])} ONNX "
                  "Conv / Gemm nodes: not matched")
            continue
        sums = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        rows = []
        for (k, spec, what), (op, t) in zip(layers[name], convs):
            s = sums[k]
            s[0] += 1
            s[2] += t
            if spec:
                s[1] += ks[spec]
                s[3] += old[spec]
                rows.append((what, k, ks[spec], old[spec], t, op))
        for op, t in ops:
            if not op.startswith(("Convolution", "Fully Connected")):
                s = sums[op.split(" #")[0]]
                s[0] += 1
                s[2] += t
        total = sum(t for _, t in ops)
        head = " old µs | old / XNNPACK |" if two else ""
        print(f"\n## {name}, batch 1: XNNPACK operators {total / 1e3:.2f} ms\n\n"
              f"| kind | count | ksbuild kernels µs | XNNPACK µs | ksbuild / XNNPACK |{head}\n|---|---:|---:|---:|---:|"
              + ("---:|---:|" if two else ""))
        for k, (count, mine, theirs, was) in sorted(sums.items(), key=lambda kv: -kv[1][2]):
            extra = f" {was:.0f} | {was / theirs:.2f} |" if two and mine else (" | |" if two else "")
            print(f"| {k} | {count} | {mine:.0f} | {theirs:.0f} | {mine / theirs:.2f} |{extra}" if mine else
                  f"| {k} | {count} | | {theirs:.0f} | |{extra}")
        print(f"\n| layer | kind | ksbuild µs | XNNPACK µs | ratio |{head} XNNPACK operator |\n|---|---|---:|---:|---:|"
              + ("---:|---:|" if two else "") + "---|")
        for what, k, mine, was, theirs, op in rows:
            extra = f" {was:.1f} | {was / theirs:.2f} |" if two else ""
            print(f"| {what} | {k} | {mine:.1f} | {theirs:.1f} | {mine / theirs:.2f} |{extra} {op} |")
    print(f"\nload average {os.getloadavg()[0]:.1f}")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
