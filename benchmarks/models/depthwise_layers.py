"""Where a depthwise network's time goes, layer by layer, against onnxruntime (docs/performance.md, "A channels-last
layout": what a channels-last pass could gain on this machine before it is built).

    python benchmarks/models/depthwise_layers.py CL_LAYERS [NETWORK ...]      e.g.
    g++ -std=c++17 -O3 -march=native -Iprelude benchmarks/models/channels_last_layers.cpp -o /tmp/cl_layers
    python benchmarks/models/depthwise_layers.py /tmp/cl_layers mobilenet_v2 efficientnet_b0

For each network (bench.py's mobilenet_v2, mobilenet_v3_small, efficientnet_b0 or a held-out one of heldout.py),
batch 1, 224 × 224: onnxruntime's per-node profile (SessionOptions.enable_profiling, 1 thread, RUNS runs, default 50;
the median of each node's kernel time), its nodes grouped by kind (depthwise, pointwise, other convolutions, the
rest); and each depthwise and 1 × 1 convolution of the network timed alone by CL_LAYERS
(benchmarks/models/channels_last_layers.cpp, one image, bias + ReLU6 as the affine epilogue, thread CPU time, the
median of ROUNDS rounds, default 5): "nchw", the kernel ksbuild calls today (ks::conv_depthwise, ks::conv or
ks::conv_pointwise), and "cl", the channels-last one (ks::conv_depthwise_cl, ks::packed_gemm of [H·W, C] with the
affine by column), and the transposition of the first such layer's input into channels-last ([C, H·W] -> [H·W, C],
plain loops). REPEATS (default 3) times in turn: each network's profile, then every layer; medians over the repeats.
Printed: per layer nchw / cl / onnxruntime µs, and per network the sums: all of it channels-last (plus the entry's
transposition: the global pool and squeeze-excite read either layout), and the faster kernel per layer without the
transpositions a change of layout would cost, so the most a channels-last pass could take off with these kernels (the
activations other than ReLU6 and the elementwise work counted in neither). onnxruntime's times are its node times
in the same runs, not interleaved with the kernels' samples. The 1 × 1 layers
of a squeeze-excite (one position) are not depthwise-network work of either layout and are left out.
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
sys.path.insert(0, str(HERE.parent / "onnx"))


def network(name: str):
    from mobilenets import MODELS as MOBILE
    from resnet import MODELS
    nets = {**{k: v[0] for k, v in {**MODELS, **MOBILE}.items()}}
    if name in nets:
        return nets[name]()
    from heldout import MODELS as HELD
    return HELD[name]()


def conv_layers(path: Path) -> dict:
    """ONNX Conv node name -> (kind, spec for CL_LAYERS or None, description, the names onnxruntime may give its node:
    the output of the Conv or of the activations it fuses, with the NCHWc transformer's suffix)."""
    import onnx
    from onnx import numpy_helper, shape_inference
    m = shape_inference.infer_shapes(onnx.load(str(path)))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    inits = {i.name: numpy_helper.to_array(i).shape for i in m.graph.initializer}
    consumers = defaultdict(list)
    for node in m.graph.node:
        for i in node.input:
            consumers[i].append(node)
    out = {}
    for node in m.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        x, w = shapes.get(node.input[0]), inits.get(node.input[1])
        if x is None or w is None:
            continue
        names, v = [], node.output[0]
        for _ in range(3):
            names += [v + "_nchwc", v, node.name]
            after = consumers[v]
            if len(after) != 1 or after[0].op_type not in ("Relu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid"):
                break
            v = after[0].output[0]
        cin, side, cout, k = x[1], x[2], w[0], w[2]
        stride, groups = attrs.get("strides", [1])[0], attrs.get("group", 1)
        if groups == cin and cin > 1:
            out[node.name] = ("depthwise", f"dw:{k}:{stride}:{cin}:{side}", f"dw {k}x{k} s{stride} {cin}ch {side}²",
                              names)
        elif k == 1 and stride == 1 and side > 1:
            out[node.name] = ("pointwise", f"pw:{cin}:{cout}:{side}", f"pw {cin}→{cout} {side}²", names)
        else:
            out[node.name] = ("conv" if side > 1 else "squeeze-excite", None,
                              f"conv {cin}→{cout} k{k} s{stride} {side}²", names)
    return out


def ort_profile(path: Path, runs: int) -> dict:
    """onnxruntime node name -> (op type, median kernel µs) over `runs` runs of one image, 1 thread."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.enable_profiling = True
    opts.profile_file_prefix = str(path.with_suffix(""))
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    for _ in range(5):
        sess.run(None, {"x": x})
    sess.end_profiling()
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        sess.run(None, {"x": x})
    events = json.loads(Path(sess.end_profiling()).read_text())
    times, ops = defaultdict(list), {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = e["name"].removesuffix("_kernel_time")
            times[node].append(e["dur"])
            ops[node] = e.get("args", {}).get("op_name", "?")
    return {n: (ops[n], float(np.median(t))) for n, t in times.items()}


def ort_conv_node(profile: dict, names: list) -> str | None:
    """onnxruntime's node of an ONNX Conv (its candidate names: conv_layers)."""
    return next((n for n in names if n in profile and "Conv" in profile[n][0]), None)


def kernel_times(cl: str, specs: list) -> dict:
    """spec -> (old µs, new µs) from one CL_LAYERS run over `specs`."""
    env = dict(os.environ, ROUNDS=os.environ.get("ROUNDS", "5"))
    lines = subprocess.run([cl, *specs], check=True, capture_output=True, text=True, env=env).stdout.splitlines()
    return {line.split()[0]: (float(line.split()[2]), float(line.split()[4])) for line in lines if line.strip()}


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    import torch
    cl, names = sys.argv[1], sys.argv[2:] or ["mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0"]
    runs, repeats = int(os.environ.get("RUNS", "50")), int(os.environ.get("REPEATS", "3"))
    folder = Path(tempfile.mkdtemp(prefix="depthwise_layers-"))
    print(f"load average {os.getloadavg()[0]:.1f}")
    convs, entry = {}, {}
    for name in names:
        path = folder / f"{name}.onnx"
        torch.onnx.export(network(name), (torch.zeros(1, 3, 224, 224),), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"])
        convs[name] = conv_layers(path)
        first = next(spec for _, spec, _, _ in convs[name].values() if spec)  # (the channels-last region's entry)
        parts = first.split(":")
        entry[name] = f"tr:{parts[3]}:{parts[4]}" if parts[0] == "dw" else f"tr:{parts[1]}:{parts[3]}"
    specs = sorted({c[1] for net in convs.values() for c in net.values() if c[1]} | set(entry.values()))
    # (in turn: each network's onnxruntime profile, then every layer of all networks; medians over the repeats)
    profiles, kernels = defaultdict(list), []
    for _ in range(repeats):
        for name in names:
            profiles[name].append(ort_profile(folder / f"{name}.onnx", runs))
        kernels.append(kernel_times(cl, specs))
    ks = {spec: tuple(float(np.median([k[spec][i] for k in kernels])) for i in (0, 1)) for spec in specs}
    for name in names:
        profile = {n: (profiles[name][0][n][0], float(np.median([p[n][1] for p in profiles[name] if n in p])))
                   for n in profiles[name][0]}
        nodes = {conv: ort_conv_node(profile, c[3]) for conv, c in convs[name].items()}
        kind_of = {n: convs[name][conv][0] for conv, n in nodes.items() if n}
        kinds = defaultdict(float)
        for n, (op, t) in profile.items():
            kinds[kind_of.get(n, op)] += t
        print(f"\n## {name}, batch 1: onnxruntime {sum(t for _, t in profile.values()) / 1e3:.2f} ms of node time\n")
        print("onnxruntime by kind (ms): " + ", ".join(f"{k} {v / 1e3:.3f}" for k, v in
                                                       sorted(kinds.items(), key=lambda kv: -kv[1])[:8]))
        print("\n| layer | count | nchw µs | cl µs | onnxruntime µs | nchw / ort | cl / ort | cl / nchw |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|")
        rows, sums = defaultdict(lambda: [0, 0.0, 0.0, 0.0, ""]), defaultdict(lambda: [0.0, 0.0, 0.0])
        for conv, (kind, spec, what, _) in convs[name].items():
            t = profile[nodes[conv]][1] if nodes[conv] else None
            if spec is None or t is None:
                continue
            r, s = rows[spec], sums[kind]
            r[0] += 1
            r[4] = what
            for i, v in enumerate((*ks[spec], t)):
                r[1 + i] += v
                s[i] += v
        for spec, (count, old, new, ort_t, what) in rows.items():
            print(f"| {what} | {count} | {old:.1f} | {new:.1f} | {ort_t:.1f} | {old / ort_t:.2f} | {new / ort_t:.2f} | "
                  f"{new / old:.2f} |")
        for kind, (old, new, ort_t) in sums.items():
            print(f"| **all {kind}** | | {old:.0f} | {new:.0f} | {ort_t:.0f} | {old / ort_t:.2f} | {new / ort_t:.2f} | "
                  f"{new / old:.2f} |")
        old, new = sum(r[1] for r in rows.values()), sum(r[2] for r in rows.values())
        best, into = sum(min(r[1], r[2]) for r in rows.values()), ks[entry[name]][0]
        ort_sum = sum(r[3] for r in rows.values())
        print(f"\nnchw sum {old:.0f} µs; all channels-last {new:.0f} + the entry's transposition ({entry[name]}) "
              f"{into:.0f} = {new + into:.0f} ({(new + into) / old:.3f} of nchw); the faster kernel per layer, no "
              f"transpositions counted, {best:.0f} ({best / old:.3f}); onnxruntime {ort_sum:.0f}")
    print(f"\nload average {os.getloadavg()[0]:.1f}")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
