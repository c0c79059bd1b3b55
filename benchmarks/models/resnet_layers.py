"""ResNet-18's layers one by one against onnxruntime: where a network's time goes (docs/performance.md, "Where the time
goes in ResNet-18").

    python benchmarks/models/resnet_layers.py FOLDER BATCHES [LAYERS]     e.g. /tmp/layers 1,8 stem7x7s2,c512_7

Each convolution of ResNet-18 at 224 x 224 (a Conv with its bias, and ReLU where the network has one), its max
pooling and its global average pooling with the classifier, exported by torch into FOLDER (once) and built as one
package with an export per layer; then per layer and batch, 1 thread, thread CPU time (time.thread_time), the median
of ROUNDS (environment, default 15) samples taken in turn with onnxruntime, each sample the mean of enough calls for
about 30 ms. GFLOP/s counts a direct convolution's multiply-adds (Winograd's layers do fewer); err: the largest
difference from onnxruntime relative to its largest output.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

LAYERS = {  # name: (in channels, out channels, kernel, stride, pad, input side, relu)
    "stem7x7s2": (3, 64, 7, 2, 3, 224, True),
    "c64_56": (64, 64, 3, 1, 1, 56, True),
    "c64to128s2": (64, 128, 3, 2, 1, 56, True),
    "ds64to128": (64, 128, 1, 2, 0, 56, False),
    "c128_28": (128, 128, 3, 1, 1, 28, True),
    "c128to256s2": (128, 256, 3, 2, 1, 28, True),
    "ds128to256": (128, 256, 1, 2, 0, 28, False),
    "c256_14": (256, 256, 3, 1, 1, 14, True),
    "c256to512s2": (256, 512, 3, 2, 1, 14, True),
    "ds256to512": (256, 512, 1, 2, 0, 14, False),
    "c512_7": (512, 512, 3, 1, 1, 7, True),
}


def models() -> dict:
    """name -> (torch module, (input channels, side), multiply-adds x 2 per image)."""
    import torch
    from torch import nn

    class Conv(nn.Module):
        def __init__(self, cin, cout, k, stride, pad, relu):
            super().__init__()
            self.c, self.relu = nn.Conv2d(cin, cout, k, stride, pad), relu

        def forward(self, x):
            y = self.c(x)
            return torch.relu(y) if self.relu else y

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class Pool(nn.Module):
        def forward(self, x):
            return nn.functional.max_pool2d(x, 3, 2, 1)

    torch.manual_seed(0)
    out = {}
    for name, (cin, cout, k, stride, pad, side, relu) in LAYERS.items():
        positions = ((side + 2 * pad - k) // stride + 1) ** 2
        out[name] = (Conv(cin, cout, k, stride, pad, relu).eval(), (cin, side), 2 * cout * cin * k * k * positions)
    out["gap_fc"] = (Head().eval(), (512, 7), 2 * 512 * 1000)
    out["maxpool"] = (Pool().eval(), (64, 112), 0)
    return out


def export(folder: Path) -> None:
    """Every layer as ONNX (a symbolic batch) and the manifest of one package exporting them all."""
    import torch
    folder.mkdir(parents=True, exist_ok=True)
    toml, exports = '[package]\nname = "resnet_layers"\n\n', "[exports]\n"
    for name, (module, (channels, side), _) in models().items():
        torch.onnx.export(module, (torch.randn(1, channels, side, side),), str(folder / f"{name}.onnx"), dynamo=False,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        toml += f'[kernels.{name}]\nonnx = "{name}.onnx"\n\n'
        exports += f'{name} = "{name}"\n'
    (folder / "layers.toml").write_text(toml + exports)


def medians(fns: dict, rounds: int, reps: int) -> dict:
    """name -> median seconds per call of fns[name], the samples taken in turn."""
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.thread_time()
            for _ in range(reps):
                fn()
            samples[name].append((time.thread_time() - start) / reps)
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> None:
    import onnxruntime as ort

    import ksbuild
    folder, batches = Path(sys.argv[1]), [int(b) for b in sys.argv[2].split(",")]
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else None
    if not (folder / "layers.toml").exists():
        export(folder)
    pkg = ksbuild.build(folder / "layers.toml", portable=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    print(f"load average {os.getloadavg()[0]:.1f}\n\n| layer | batch | ksbuild ms | onnxruntime ms | ksbuild / ort | "
          "GFLOP/s ksbuild | GFLOP/s ort | err |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, (_, (channels, side), flops) in models().items():
        if only and name not in only:
            continue
        sess = ort.InferenceSession(str(folder / f"{name}.onnx"), opts, providers=["CPUExecutionProvider"])
        fn = getattr(pkg, name)
        for b in batches:
            x = np.random.default_rng(b).standard_normal((b, channels, side, side)).astype(np.float32)
            want = sess.run(None, {"x": x})[0]
            err = float(np.abs(fn(x) - want).max() / max(float(np.abs(want).max()), 1e-30))
            start = time.thread_time()
            fn(x)
            reps = max(2, int(0.03 / max(time.thread_time() - start, 1e-5)))
            t = medians({"ks": lambda: fn(x), "ort": lambda: sess.run(None, {"x": x})},
                        int(os.environ.get("ROUNDS", "15")), reps)
            rate = [f"{flops * b / t[k] / 1e9:.0f}" if flops else "" for k in ("ks", "ort")]
            print(f"| {name} | {b} | {t['ks'] * 1e3:.3f} | {t['ort'] * 1e3:.3f} | {t['ks'] / t['ort']:.2f} | "
                  f"{rate[0]} | {rate[1]} | {err:.1e} |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
