"""int8 inference: ksbuild's integer kernels against onnxruntime's, and each against its float model.

    python benchmarks/int8/bench.py [--models mobilenet_v2 kws mlp resnet18 mobilenet_v3_small efficientnet_b0]
                                    [--batches 1 8] [--formats qdq qop] [--side 224] [--repeats 10] [--budget 3]
                                    [--clock cpu] [--work DIR] [--against OTHER_CHECKOUT]

Models (random weights, nothing downloaded): MobileNetV2 and ResNet-18 in torchvision's layout
(benchmarks/onnx/resnet.py), MobileNetV3-small and EfficientNet-B0 (benchmarks/onnx/mobilenets.py; 224×224 by
default), a keyword-spotting
CNN in the style of the DS-CNN of "Hello Edge" (Zhang et al. 2017: a 10×4 convolution over 49×10 MFCC features,
four depthwise-separable blocks, average pooling, 12 classes) and an MLP 784-256-256-10. Each is exported with
torch.onnx.export and quantized with onnxruntime's quantize_static (uint8 activations, int8 weights per channel,
calibrated on 16 random inputs) in its QDQ and QOperator formats. All variants are built into one ksbuild package
(the portable x86-64 build, the kernel layer from ksbuild's cache) and timed against onnxruntime with one thread
(median of samples taken in turn, ratios < 1: ksbuild faster). Also printed: how many output elements equal
onnxruntime's exactly ("= ort": 1.000 for every int8 row on x86-64 with AVX2, where QLinearAdd is onnxruntime's
arithmetic too; below 1 only through the operators that docs/quantization.md lists as within one step, whose
differences then grow through the layers after them), and top-1 agreement of the quantized model with the float one over 64 random inputs (the
benchmark's check that the requantization is right, not only fast).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "onnx"))
from bench import median_times, one_thread_options  # noqa: E402


def kws_cnn():
    """A DS-CNN-style keyword spotter: input [1, 1, 49, 10] (MFCC frames x coefficients), 12 classes."""
    from torch import nn

    def separable(c):
        return [nn.Conv2d(c, c, 3, padding=1, groups=c), nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c, 1),
                nn.BatchNorm2d(c), nn.ReLU()]
    layers = [nn.Conv2d(1, 64, (10, 4), stride=2, padding=(5, 1)), nn.BatchNorm2d(64), nn.ReLU()]
    for _ in range(4):
        layers += separable(64)
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 12)]
    return nn.Sequential(*layers)


def models(side: int) -> dict:
    """name -> (torch module, input shape)."""
    import torch
    from mobilenets import efficientnet_b0, mobilenet_v3_small
    from resnet import mobilenet_v2, resnet18
    from torch import nn
    torch.manual_seed(0)
    return {
        "mobilenet_v2": (mobilenet_v2(), (1, 3, side, side)),
        # (not in the default list: --models resnet18 mobilenet_v3_small efficientnet_b0)
        "resnet18": (resnet18(), (1, 3, side, side)),
        "mobilenet_v3_small": (mobilenet_v3_small(), (1, 3, side, side)),
        "efficientnet_b0": (efficientnet_b0(), (1, 3, side, side)),
        "kws": (kws_cnn(), (1, 1, 49, 10)),
        "mlp": (nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)),
                (1, 784)),
    }


def quantize(f32: Path, out: Path, shape, fmt: str) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": np.random.RandomState(i).randn(*shape).astype(np.float32)} for i in range(16)])

        def get_next(self):
            return next(self.batches, None)
    quantize_static(str(f32), str(out), Reader(), quant_format=QuantFormat.QDQ if fmt == "qdq" else
                    QuantFormat.QOperator, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["mobilenet_v2", "kws", "mlp"])
    p.add_argument("--batches", nargs="+", type=int, default=[1], help="export each model at these batch sizes")
    p.add_argument("--formats", nargs="+", default=["qdq", "qop"], choices=["qdq", "qop"])
    p.add_argument("--side", type=int, default=224)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--budget", type=float, default=3.0)
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                   help="cpu: time.process_time (the time other jobs take left out); wall: time.perf_counter")
    p.add_argument("--work", type=Path, help="folder for the ONNX files and packages (kept; its ONNX files reused)")
    p.add_argument("--against", metavar="CHECKOUT", type=Path,
                   help="also build the same files with the ksbuild of another checkout (its folder put first on "
                        "PYTHONPATH, in a subprocess) and time its package in turn with this one's: columns A, B")
    args = p.parse_args(argv)
    import logging
    import subprocess

    import onnxruntime as ort
    import torch

    import ksbuild
    logging.getLogger().setLevel(logging.ERROR)  # (quantize_static's advice to pre-process)
    ort.set_default_logger_severity(3)  # (its warnings on the quantized models' unused initializers)
    torch.set_num_threads(1)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    work = args.work or Path(tempfile.mkdtemp(prefix="ksbuild-int8-"))
    work.mkdir(parents=True, exist_ok=True)
    chosen = {k: v for k, v in models(args.side).items() if k in args.models}
    variants = {}
    for name, (module, shape1) in chosen.items():
        for b in args.batches:
            shape = (b,) + tuple(shape1[1:])
            base = f"{name}_b{b}"
            f32 = work / f"{base}_f32.onnx"
            if not f32.exists():
                torch.onnx.export(module.eval(), torch.randn(*shape), f32, input_names=["x"], output_names=["y"],
                                  dynamo=False, opset_version=17)
            variants[f"{base}_f32"] = (f32, shape)
            for fmt in args.formats:
                q = work / f"{base}_{fmt}.onnx"
                if not q.exists():
                    quantize(f32, q, shape, fmt)
                variants[f"{base}_{fmt}"] = (q, shape)

    def manifest(package: str) -> Path:
        lines = [f'[package]\nname = "{package}"\nversion = "0.1.0"\n']
        lines += [f'[kernels.{n}]\nonnx = "{path.name}"\n' for n, (path, _) in variants.items()]
        lines.append("[exports]\n" + "".join(f'{n} = "{n}"\n' for n in variants))
        (work / f"{package}.toml").write_text("\n".join(lines))
        return work / f"{package}.toml"
    t0 = time.perf_counter()
    pkg = ksbuild.build(manifest("int8_bench"), out=work / "B", quiet=True)
    print(f"built {len(variants)} models in {time.perf_counter() - t0:.1f} s ({work})")
    old = None
    if args.against:
        env = dict(os.environ, PYTHONPATH=str(args.against.resolve()))  # (and cwd: `-c` puts it first on sys.path)
        code = ("import sys, ksbuild; ksbuild.build(sys.argv[1], out=sys.argv[2], quiet=True); "
                "print(ksbuild.__file__)")
        made = subprocess.run([sys.executable, "-c", code, str(manifest("int8_bench_a")), str(work / "A")],
                              env=env, cwd=args.against, check=True, capture_output=True, text=True)
        print(f"A: {made.stdout.strip()}")
        old = ksbuild.load(work / "A")
    head = f"{'model':<26}" + (f"{'A ms':>9}" if old else "") + f"{'ksbuild ms':>11}{'ort ms':>9}"
    head += (f"{'A/ort':>7}" if old else "") + f"{'ratio':>7}{'= ort':>8}{'top-1':>7}"
    print(f"# clock {args.clock}, 1 thread, median of {args.repeats} round-robin samples")
    print(head)
    for name, (path, shape) in variants.items():
        sess = ort.InferenceSession(str(path), one_thread_options(), providers=["CPUExecutionProvider"])
        x = np.random.RandomState(7).randn(*shape).astype(np.float32)
        fn = getattr(pkg, name)
        want, got = sess.run(None, {"x": x})[0], np.asarray(fn(x))
        same = np.count_nonzero(got == want) / want.size
        top1 = "-"
        if not name.endswith("_f32"):
            reference = getattr(pkg, name.rsplit("_", 1)[0] + "_f32")
            n = max(1, 64 // shape[0])
            inputs = [np.random.RandomState(1000 + i).randn(*shape).astype(np.float32) for i in range(n)]
            agree = [np.asarray(fn(v)).argmax(-1) == np.asarray(reference(v)).argmax(-1) for v in inputs]
            top1 = f"{np.mean(agree):.2f}"
        fns = [lambda: fn(x), lambda: sess.run(None, {"x": x})]
        if old:
            a_fn = getattr(old, name)
            if not np.array_equal(np.asarray(a_fn(x)), got):
                print(f"  ({name}: A's output differs from B's)")
            fns.append(lambda: a_fn(x))
        times = median_times(fns, args.repeats, args.budget, clock=clock)
        ks_t, ort_t = times[:2]
        row = f"{name:<26}" + (f"{times[2] * 1e3:>9.3f}" if old else "") + f"{ks_t * 1e3:>11.3f}{ort_t * 1e3:>9.3f}"
        row += (f"{times[2] / ort_t:>7.2f}" if old else "") + f"{ks_t / ort_t:>7.2f}{same:>8.3f}{top1:>7}"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
