"""int8 inference: ksbuild's integer kernels against onnxruntime's, and each against its float model.

    python benchmarks/int8/bench.py [--models mobilenet_v2 kws mlp resnet18 mobilenet_v3_small efficientnet_b0
                                     lstm_text bert_small gpt2_small]
                                    [--batches 1 8] [--formats qdq qop dyn] [--side 224] [--repeats 10] [--budget 3]
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
differences then grow through the layers after them). On a host whose onnxruntime saturates u8 x s8 products (x86-64
without VNNI: tests/ort_oracle.py) "= ort" compares with that file's exact oracle, onnxruntime running the model
with its int8 weights stored as uint8; the timed onnxruntime is always the host's own session of the model as
quantized; the header says which oracle "= ort" used. Also printed: top-1 agreement of the quantized model with the
float one over 64 random inputs (the benchmark's check that the requantization is right, not only fast). With random
weights and random inputs a CNN's float model gives one class for every input ("classes": how many it gave), which
any output agrees with; so also "top-1 c", the agreement of the argmax of each output less the float model's mean
output (what varies with the input), beside "chance", what that reads when outputs of different inputs are paired.

The networks of benchmarks/models/bench.py that read tokens: lstm_text (an embedding, a 2-layer LSTM, a linear layer
to 2 classes), bert_small and gpt2_small (transformers' BertModel and GPT2Model, 4 layers of 512, 8 heads, 128
tokens, their last hidden state as the output; GPT-2 exported through torch.export). They are calibrated on 8 random
token sequences, and also quantized with quantize_dynamic (format "dyn": int8 weights per tensor, activations
quantized at run time by DynamicQuantizeLinear, products as MatMulInteger, the LSTMs as com.microsoft
DynamicQuantizeLSTM: what is used for transformers and LSTMs). For the hidden states "top-1" is the share of tokens
whose argmax over the hidden dimension agrees with the float model's, and "max err" the largest difference from the
float model's output (relative to its largest magnitude).
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


def ort_oracle():
    """tests/ort_oracle.py (by path, under a name of its own): onnxruntime as an exact oracle of int8 models."""
    import importlib.util

    if "ksbuild_ort_oracle" not in sys.modules:
        spec = importlib.util.spec_from_file_location("ksbuild_ort_oracle", HERE.parent.parent / "tests/ort_oracle.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["ksbuild_ort_oracle"] = module
    return sys.modules["ksbuild_ort_oracle"]


def oracle_note(saturates: bool) -> str:
    """The header's line on what "= ort" compares with."""
    if saturates:
        return ("# = ort: against tests/ort_oracle.py's exact oracle (this host's onnxruntime saturates u8 x s8 "
                "products: no VNNI), int8 weights run as uint8; ort ms: the host's session of the model as quantized")
    return "# = ort: against this host's onnxruntime session (its u8 x s8 products are exact here)"


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


TOKENS = {"lstm_text": 64, "bert_small": 128, "gpt2_small": 128}
"""The token models and their sequence lengths (their input: int64 ids below 1000)."""


def token_models() -> dict:
    """name -> torch module, for the networks of benchmarks/models/bench.py that read tokens (BERT and GPT-2 when
    transformers imports)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("models_bench", HERE.parent / "models" / "bench.py")
    nets = sys.modules.get("models_bench") or importlib.util.module_from_spec(spec)
    if "models_bench" not in sys.modules:
        sys.modules["models_bench"] = nets
        spec.loader.exec_module(nets)
    out = {"lstm_text": nets.lstm_text}
    try:
        import transformers  # noqa: F401
        out.update(bert_small=nets.bert_small, gpt2_small=nets.gpt2_small)
    except ImportError:
        pass
    return out


def example(name: str, shape, seed: int) -> np.ndarray:
    """An input of the model: token ids for the token models, else normal floats."""
    if name in TOKENS:
        return np.random.default_rng(seed).integers(0, 1000, shape)
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def export(name: str, module, path: Path, shape) -> None:
    """The module as ONNX at this batch (GPT-2 through torch.export: the TorchScript exporter fails on its masks)."""
    import torch
    x = torch.from_numpy(example(name, shape, 0))
    if name == "gpt2_small":
        torch.onnx.export(module.eval(), (x,), path, dynamo=True, input_names=["x"], output_names=["y"],
                          external_data=False)
        return
    torch.onnx.export(module.eval(), (x,), path, input_names=["x"], output_names=["y"], dynamo=False,
                      opset_version=17)


def settle_batchnorm(module, shape, batches: int = 4, batch: int = 8):
    """module with its BatchNorm layers' running statistics taken from `batches` random batches of inputs of
    `shape` (torch's layers start at mean 0, variance 1, so through random weights the activations shrink or grow
    layer by layer until the CNNs' outputs no longer depend on their input: MobileNetV2's varied by 2e-7 of their
    spread over the classes from one random image to another). After it each layer's outputs are normalized over
    random inputs, as a trained network's are over its data, and the classes vary with the input, so the top-1
    columns can tell a right quantization from a wrong one. Only the BatchNorm constants change, not the work."""
    import torch
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return module
    for m in norms:
        m.reset_running_stats()
        m.momentum = None   # (a cumulative average over the batches)
    module.train()
    with torch.no_grad():
        for i in range(batches):
            module(torch.from_numpy(np.random.RandomState(500 + i).randn(batch, *shape[1:]).astype(np.float32)))
    return module.eval()


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


def all_models(side: int, names) -> dict:
    """name -> (torch module, input shape) of the chosen models, the token models built only when chosen, the CNNs'
    BatchNorm statistics taken from random inputs (settle_batchnorm)."""
    chosen = {k: (settle_batchnorm(m, shape), shape) for k, (m, shape) in models(side).items() if k in names}
    chosen.update({k: (make(), (1, TOKENS[k])) for k, make in token_models().items() if k in names})
    return chosen


def quantize(name: str, f32: Path, out: Path, shape, fmt: str, inputs=None) -> None:
    """f32 quantized by onnxruntime: quantize_static in the QDQ or QOperator format (uint8 activations, int8 weights
    per channel, calibrated on `inputs`, the model's input `x` arrays: by default 8 random token sequences for a
    token model, else 16 random inputs of `shape`), or (dyn) quantize_dynamic (int8 weights). tests/
    test_int8_sequences.py quantizes its models with it."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    if fmt == "dyn":
        quantize_dynamic(str(f32), str(out), weight_type=QuantType.QInt8)
        return

    class Reader(CalibrationDataReader):
        def __init__(self):
            calibration = inputs if inputs is not None else \
                [example(name, shape, i) for i in range(8 if name in TOKENS else 16)]
            self.batches = iter([{"x": x} for x in calibration])

        def get_next(self):
            return next(self.batches, None)
    quantize_static(str(f32), str(out), Reader(), quant_format=QuantFormat.QDQ if fmt == "qdq" else
                    QuantFormat.QOperator, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True)


def against_float(fn, reference, model: str, shape) -> tuple[str, ...]:
    """The quantized fn against its float model over 64 random inputs (8 for a token model), as strings: "top-1",
    the agreement of the argmax over the last axis (the class, or a token's hidden dimension); "max err", the largest
    difference relative to the float output's largest magnitude; "classes", how many different argmaxes the float
    model gave (1: the same class for every input, so "top-1" says nothing); "top-1 c", the agreement of the argmax
    of each output less its model's mean output over the inputs (what varies from input to input, a constant offset
    of the quantized outputs left out), and "chance", the same agreement with each quantized output paired with the
    float output of another input (what "top-1 c" reads if the quantized model ignores its input)."""
    n = max(1, (8 if model in TOKENS else 64) // shape[0])
    got, want = [], []
    for i in range(n):
        v = example(model, shape, 1000 + i)
        got.append(np.asarray(fn(v), np.float64))
        want.append(np.asarray(reference(v), np.float64))
    size = got[0].shape[-1]
    got, want = np.concatenate(got).reshape(-1, size), np.concatenate(want).reshape(-1, size)
    g, w = (got - got.mean(0)).argmax(-1), (want - want.mean(0)).argmax(-1)
    step = want.shape[0] // n   # (another input's rows: the rows of one call further on)
    return (f"{np.mean(got.argmax(-1) == want.argmax(-1)):.2f}",
            f"{np.abs(got - want).max() / np.abs(want).max():.3f}", str(len(set(want.argmax(-1).tolist()))),
            f"{np.mean(g == w):.2f}", f"{np.mean(g == np.roll(w, step if n > 1 else 1)):.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["mobilenet_v2", "kws", "mlp"])
    p.add_argument("--batches", nargs="+", type=int, default=[1], help="export each model at these batch sizes")
    p.add_argument("--formats", nargs="+", default=["qdq", "qop"], choices=["qdq", "qop", "dyn"],
                   help="dyn: quantize_dynamic (the token models only)")
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

    sys.path.insert(0, str(HERE.parent / "onnx"))
    import onnxruntime as ort
    import torch
    from bench import median_times, one_thread_options  # (here: tests import this file for `quantize`)

    import ksbuild
    logging.getLogger().setLevel(logging.ERROR)  # (quantize_static's advice to pre-process)
    ort.set_default_logger_severity(3)  # (its warnings on the quantized models' unused initializers)
    torch.set_num_threads(1)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    work = args.work or Path(tempfile.mkdtemp(prefix="ksbuild-int8-"))
    work.mkdir(parents=True, exist_ok=True)
    chosen = all_models(args.side, args.models)
    variants = {}
    for name, (module, shape1) in chosen.items():
        for b in args.batches:
            shape = (b,) + tuple(shape1[1:])
            base = f"{name}_b{b}"
            f32 = work / f"{base}_f32.onnx"
            if not f32.exists():
                export(name, module, f32, shape)
            variants[f"{base}_f32"] = (f32, shape, name)
            for fmt in args.formats:
                if fmt == "dyn" and name not in TOKENS:
                    continue
                q = work / f"{base}_{fmt}.onnx"
                if not q.exists():
                    quantize(name, f32, q, shape, fmt)
                variants[f"{base}_{fmt}"] = (q, shape, name)

    def manifest(package: str) -> Path:
        lines = [f'[package]\nname = "{package}"\nversion = "0.1.0"\n']
        lines += [f'[kernels.{n}]\nonnx = "{path.name}"\n' for n, (path, *_) in variants.items()]
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
    head += (f"{'A/ort':>7}" if old else "") + f"{'ratio':>7}{'= ort':>8}{'top-1':>7}{'max err':>9}"
    head += f"{'classes':>8}{'top-1 c':>8}{'chance':>7}"
    print(f"# clock {args.clock}, 1 thread, median of {args.repeats} round-robin samples, load average "
          f"{os.getloadavg()[0]:.1f} (a row's ratio moves with the load: docs/quantization.md, the LSTM)")
    oracle = ort_oracle()
    print(oracle_note(oracle.saturates()))
    print(head)
    for name, (path, shape, model) in variants.items():
        sess = ort.InferenceSession(str(path), one_thread_options(), providers=["CPUExecutionProvider"])
        exact = oracle.session(path, one_thread_options()) if oracle.saturates() else sess
        x = example(model, shape, 7)
        fn = getattr(pkg, name)
        want, got = exact.run(None, {"x": x})[0], np.asarray(fn(x))
        same = np.count_nonzero(got == want) / want.size
        top1, err, classes, top1c, chance = "-", "-", "-", "-", "-"
        if not name.endswith("_f32"):
            reference = getattr(pkg, name.rsplit("_", 1)[0] + "_f32")
            top1, err, classes, top1c, chance = against_float(fn, reference, model, shape)
        fns = [lambda: fn(x), lambda: sess.run(None, {"x": x})]
        if old:
            a_fn = getattr(old, name)
            if not np.array_equal(np.asarray(a_fn(x)), got):
                print(f"  ({name}: A's output differs from B's)")
            fns.append(lambda: a_fn(x))
        times = median_times(fns, args.repeats, args.budget, clock=clock)
        ks_t, ort_t = times[:2]
        row = f"{name:<26}" + (f"{times[2] * 1e3:>9.3f}" if old else "") + f"{ks_t * 1e3:>11.3f}{ort_t * 1e3:>9.3f}"
        row += (f"{times[2] / ort_t:>7.2f}" if old else "") + f"{ks_t / ort_t:>7.2f}{same:>8.3f}"
        row += f"{top1:>7}{err:>9}{classes:>8}{top1c:>8}{chance:>7}"
        print(row, flush=True)
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
