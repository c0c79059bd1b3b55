"""int8 convolutions one layer at a time: ResNet-18's convolution shapes, each a single-layer model (Conv + Relu)
quantized by onnxruntime's quantize_static, built by ksbuild and timed against onnxruntime (one thread, CPU time).

    python benchmarks/int8/layers.py [--formats qdq qop] [--batch 1] [--repeats 10] [--budget 1] [--only NAME...]
    python benchmarks/int8/layers.py --kernels [--batch 1]

Says which layers of a network lose to onnxruntime's kernels (benchmarks/int8/bench.py times whole networks). A
one-layer model's time includes its input's QuantizeLinear and output's DequantizeLinear (float in and out);
--kernels times onnxruntime's QLinearConv alone instead (one node, uint8 in and out, per-channel int8 weights: what
benchmarks/int8/qconv_layers.cpp times of ks::qconv).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "onnx"))
from bench import median_times, one_thread_options  # noqa: E402

# (name, in channels, out channels, kernel, stride, input side): ResNet-18's convolutions at 224 × 224, each
# shape once, with how many times the network has it.
RESNET18 = [
    ("conv1_7x7s2", 3, 64, 7, 2, 224, 1),
    ("l1_3x3", 64, 64, 3, 1, 56, 4),
    ("l2_3x3s2", 64, 128, 3, 2, 56, 1),
    ("l2_1x1s2", 64, 128, 1, 2, 56, 1),
    ("l2_3x3", 128, 128, 3, 1, 28, 3),
    ("l3_3x3s2", 128, 256, 3, 2, 28, 1),
    ("l3_1x1s2", 128, 256, 1, 2, 28, 1),
    ("l3_3x3", 256, 256, 3, 1, 14, 3),
    ("l4_3x3s2", 256, 512, 3, 2, 14, 1),
    ("l4_1x1s2", 256, 512, 1, 2, 14, 1),
    ("l4_3x3", 512, 512, 3, 1, 7, 3),
]


def layer(cin: int, cout: int, k: int, stride: int):
    """Conv (same padding) + Relu as a torch module."""
    from torch import nn
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2), nn.ReLU())


def quantize(f32: Path, out: Path, shape, fmt: str) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": np.random.RandomState(i).rand(*shape).astype(np.float32)} for i in range(4)])

        def get_next(self):
            return next(self.batches, None)
    quantize_static(str(f32), str(out), Reader(), quant_format=QuantFormat.QDQ if fmt == "qdq" else
                    QuantFormat.QOperator, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True)


def qlinearconv(batch: int, cin: int, cout: int, k: int, stride: int, side: int):
    """One QLinearConv node (same padding), uint8 x and y, int8 weights with a scale per output channel."""
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.RandomState(0).randint(-127, 128, size=(cout, cin, k, k)).astype(np.int8)
    consts = {"xs": np.array(0.02, np.float32), "xz": np.array(7, np.uint8), "w": w,
              "ws": np.full(cout, 0.001, np.float32), "wz": np.zeros(cout, np.int8), "ys": np.array(0.5, np.float32),
              "yz": np.array(3, np.uint8)}
    out = (side + 2 * (k // 2) - k) // stride + 1
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                            pads=[k // 2] * 4, strides=[stride, stride], kernel_shape=[k, k])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8,
                                                                          [batch, cin, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [batch, cout, out, out])],
                              [numpy_helper.from_array(v, n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def time_kernels(batch: int) -> None:
    """onnxruntime's QLinearConv alone per layer: CPU time per call, best of 7 samples of >= 30 ms."""
    import onnxruntime as ort
    print(f"{'layer':<16}{'ort ms':>9}{'GMAC/s':>8}")
    for name, cin, cout, k, stride, side, _ in RESNET18:
        sess = ort.InferenceSession(qlinearconv(batch, cin, cout, k, stride, side).SerializeToString(),
                                    one_thread_options(), providers=["CPUExecutionProvider"])
        x = np.random.RandomState(1).randint(0, 256, size=(batch, cin, side, side)).astype(np.uint8)
        best = float("inf")
        for _ in range(7):
            n, t0 = 0, time.thread_time()
            while time.thread_time() - t0 < 0.03:
                sess.run(None, {"x": x})
                n += 1
            best = min(best, (time.thread_time() - t0) / n)
        out = (side + 2 * (k // 2) - k) // stride + 1
        print(f"{name:<16}{best * 1e3:>9.3f}{batch * cout * out * out * cin * k * k / best * 1e-9:>8.1f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--formats", nargs="+", default=["qdq"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--budget", type=float, default=1.0)
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--kernels", action="store_true", help="onnxruntime's QLinearConv alone (no ksbuild build)")
    args = p.parse_args(argv)
    if args.kernels:
        time_kernels(args.batch)
        return 0
    import logging

    import onnxruntime as ort
    import torch

    import ksbuild
    logging.getLogger().setLevel(logging.ERROR)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="ksbuild-int8-layers-"))
    variants = {}
    for name, cin, cout, k, stride, side, _ in RESNET18:
        if args.only and name not in args.only:
            continue
        shape = (args.batch, cin, side, side)
        f32 = work / f"{name}_f32.onnx"
        torch.onnx.export(layer(cin, cout, k, stride).eval(), torch.rand(*shape), f32, input_names=["x"],
                          output_names=["y"], dynamo=False, opset_version=17)
        for fmt in args.formats:
            quantize(f32, work / f"{name}_{fmt}.onnx", shape, fmt)
            variants[f"{name}_{fmt}"] = (work / f"{name}_{fmt}.onnx", shape)
    lines = ['[package]\nname = "int8_layers"\nversion = "0.1.0"\n']
    lines += [f'[kernels.{n}]\nonnx = "{path.name}"\n' for n, (path, _) in variants.items()]
    lines.append("[exports]\n" + "".join(f'{n} = "{n}"\n' for n in variants))
    (work / "manifest.toml").write_text("\n".join(lines))
    t0 = time.perf_counter()
    pkg = ksbuild.build(work / "manifest.toml", quiet=True)
    print(f"built {len(variants)} layers in {time.perf_counter() - t0:.1f} s ({work})")
    counts = {name: n for name, *_, n in RESNET18}
    print(f"{'layer':<16}{'ksbuild ms':>11}{'ort ms':>9}{'ratio':>7}{'= ort':>7}{'x net':>7}{'loss ms':>9}")
    for name, (path, shape) in variants.items():
        sess = ort.InferenceSession(str(path), one_thread_options(), providers=["CPUExecutionProvider"])
        x = np.random.RandomState(7).rand(*shape).astype(np.float32)
        fn = getattr(pkg, name)
        want, got = sess.run(None, {"x": x})[0], np.asarray(fn(x))
        same = np.count_nonzero(got == want) / want.size
        ks_t, ort_t = median_times([lambda: fn(x), lambda: sess.run(None, {"x": x})], args.repeats, args.budget,
                                   clock=time.process_time)
        n = counts[name.rsplit("_", 1)[0]]
        print(f"{name:<16}{ks_t * 1e3:>11.3f}{ort_t * 1e3:>9.3f}{ks_t / ort_t:>7.2f}{same:>7.3f}{n:>7}"
              f"{(ks_t - ort_t) * n * 1e3:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
