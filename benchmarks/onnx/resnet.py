"""Convolutional network inference benchmark: a torch ResNet-18 or MobileNetV2 (defined here: the torchvision
architectures, random weights, nothing downloaded) exported with torch.onnx.export, compiled by ksbuild (backend
plain, the portable build with its run-time choice of instruction set), against onnxruntime with one thread,
torch eager (one thread, no_grad) and memcpy of the weights' bytes (a batch-1 network reads every weight once:
the physical limit).

    python benchmarks/onnx/resnet.py [--model resnet18|mobilenet_v2] [--repeats 20] [--budget 3]
                                     [--sides 64 224] [--batches 1 8]

One build per image side (the spatial sizes are fixed, the batch dim symbolic). Outputs are compared with
onnxruntime first. Each time is the median of --repeats samples of calls from Python, the contenders sampled in
turn (bench.median_times). Ratios > 1 mean ksbuild is faster.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # (before numpy loads its BLAS)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
# (bench.py beside this file by path, under a name of its own: another `bench` may be imported already)
_spec = importlib.util.spec_from_file_location("onnx_bench", Path(__file__).resolve().parent / "bench.py")
_onnx_bench = sys.modules.get("onnx_bench") or importlib.util.module_from_spec(_spec)
if "onnx_bench" not in sys.modules:
    sys.modules["onnx_bench"] = _onnx_bench
    _spec.loader.exec_module(_onnx_bench)
eager, median_times, one_thread_options = _onnx_bench.eager, _onnx_bench.median_times, _onnx_bench.one_thread_options


def _with_random_statistics(cls):
    """cls() in eval mode, seeded, its batch norms' running statistics drawn at random (so that the folded batch
    norms are not identities)."""
    import torch
    torch.manual_seed(0)
    m = cls().eval()
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
    return m


def resnet18():
    """ResNet-18 (He et al., "Deep Residual Learning for Image Recognition", 2016; torchvision's layout: a 7×7
    stride-2 stem, max pooling, four stages of two basic blocks, global average pooling, a 1000-way linear layer),
    in eval mode with running statistics drawn at random so that the folded batch norms are not identities."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
                blocks += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return _with_random_statistics(ResNet18)


def mobilenet_v2():
    """MobileNetV2 (Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks", 2018; torchvision's
    layout, width 1.0: a 3×3 stride-2 stem, 17 inverted residual blocks (1×1 expansion, 3×3 depthwise, 1×1
    projection, batch norms and ReLU6), a 1×1 convolution to 1280 channels, global average pooling, a 1000-way
    linear layer), in eval mode with random running statistics as resnet18's."""
    import torch
    from torch import nn

    def conv(cin, cout, k, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return layers + [nn.ReLU6()] if act else layers

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, t: int):
            super().__init__()
            h = cin * t
            self.body = nn.Sequential(*(conv(cin, h, 1) if t != 1 else []), *conv(h, h, 3, stride, groups=h),
                                      *conv(h, cout, 1, act=False))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            layers, cin = conv(3, 32, 3, 2), 32
            for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                               (6, 160, 3, 2), (6, 320, 1, 1)]:
                for i in range(n):
                    layers.append(Inverted(cin, c, s if i == 0 else 1, t))
                    cin = c
            self.features = nn.Sequential(*layers, *conv(cin, 1280, 1))
            self.fc = nn.Linear(1280, 1000)

        def forward(self, x):
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    return _with_random_statistics(MobileNetV2)


MODELS = {"resnet18": (resnet18, "ResNet-18"), "mobilenet_v2": (mobilenet_v2, "MobileNetV2")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="resnet18")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--budget", type=float, default=3.0)
    p.add_argument("--sides", type=int, nargs="+", default=[64, 224])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    a = p.parse_args(argv)
    import onnxruntime as ort
    import torch

    import ksbuild
    torch.set_num_threads(1)
    build, title = MODELS[a.model]
    model = build()
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    src = np.ones(weights // 4, np.float32)
    dst = np.empty_like(src)
    folder = Path(tempfile.mkdtemp(prefix=f"ksbuild-{a.model}-bench-"))
    opts = one_thread_options()
    print(f"# {title} ({platform.processor() or platform.machine()}, 1 thread, median of {a.repeats}; times in "
          f"ms; weights {weights / 2 ** 20:.1f} MiB)\n")
    print("| input | onnxruntime | torch eager | ksbuild | memcpy of the weights | ort / ksbuild | eager / ksbuild "
          "| max err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for side in a.sides:
        path = folder / f"{a.model}_{side}.onnx"
        torch.onnx.export(model, (torch.zeros(1, 3, side, side),), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        manifest = folder / f"manifest_{side}.toml"
        manifest.write_text(f'[package]\nname = "{a.model}_{side}"\n\n[kernels.net]\nonnx = "{path.name}"\n\n'
                            '[exports]\nnet = "net"\n')
        pkg = ksbuild.build(manifest, portable=True)
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        for batch in a.batches:
            x = np.random.default_rng(side + batch).standard_normal((batch, 3, side, side)).astype(np.float32)
            xt = torch.from_numpy(x)
            want = sess.run(None, {"x": x})[0]
            err = float(np.abs(pkg.net(x) - want).max())
            fns = [lambda: sess.run(None, {"x": x}), lambda: eager(model, xt), lambda: pkg.net(x),
                   lambda: np.copyto(dst, src)]
            t_ort, t_eager, t_ks, t_copy = median_times(fns, a.repeats, a.budget)
            print(f"| [{batch}, 3, {side}, {side}] | {1e3 * t_ort:.2f} | {1e3 * t_eager:.2f} | {1e3 * t_ks:.2f} | "
                  f"{1e3 * t_copy:.2f} | {t_ort / t_ks:.2f} | {t_eager / t_ks:.2f} | {err:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
